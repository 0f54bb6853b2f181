"""``SundialOptions``: the runner's own pipeline options, declared for Beam's Python SDK.

Beam's portable runners send only options some ``PipelineOptions`` class declares. The list
here is not written by hand: it is the runner's own table, as ``sundial --list-options``
prints it, stored in the wheel as ``options.json`` when the wheel is built (and read from the
binary when it is missing, as in a source checkout). So every ``--sundial_*`` option the
runner reads can be given on the command line, ``--sundial_clock=wall`` and the others,
each reaching the runner as ``beam:option:sundial_*:v1``.
"""

import argparse
import functools
import json
import subprocess
from pathlib import Path
from typing import Any, Dict, List, Optional, Union

from apache_beam.options.pipeline_options import PipelineOptions

from sundial_beam._binary import binary_path

_TABLE = Path(__file__).resolve().parent / "options.json"

OptionRow = Dict[str, Any]


def _parse_table(text: str, where: str) -> List[OptionRow]:
    try:
        data = json.loads(text)
        rows = data["options"]
    except (ValueError, KeyError, TypeError) as e:
        raise RuntimeError(f"sundial_beam: {where} is not the runner's option table: {e}") from e
    if not isinstance(rows, list) or not all(
            isinstance(r, dict) and isinstance(r.get("name"), str) for r in rows):
        raise RuntimeError(f"sundial_beam: {where}: expected a list of options with names")
    return rows


def read_binary_table(binary: Optional[str] = None) -> List[OptionRow]:
    """The table as the binary prints it (``sundial --list-options``)."""
    path = binary or binary_path()
    out = subprocess.run([path, "--list-options"], check=True, capture_output=True, text=True,
                         timeout=60)
    return _parse_table(out.stdout, f"the output of {path} --list-options")


@functools.lru_cache(maxsize=1)
def option_table() -> List[OptionRow]:
    """The runner's option table: options.json in the package, else the binary's."""
    if _TABLE.is_file():
        return _parse_table(_TABLE.read_text(encoding="utf-8"), str(_TABLE))
    return read_binary_table()


def _bool_value(text: str) -> bool:
    word = text.strip().lower()
    if word in ("true", "1", "yes"):
        return True
    if word in ("false", "0", "no"):
        return False
    raise argparse.ArgumentTypeError(f"expected true or false, got {text!r}")


def add_arguments(parser: argparse.ArgumentParser, rows: List[OptionRow]) -> None:
    """Declare one ``--NAME`` argument per row of the runner's table."""
    for row in rows:
        kind = row.get("kind", "string")
        help_text = str(row.get("help", "")).replace("%", "%%")
        kwargs: Dict[str, Union[object, None]] = {"default": None, "help": help_text}
        if kind == "bool":
            # --sundial_keep_artifacts alone means true; =false and =true are accepted too.
            kwargs.update(type=_bool_value, nargs="?", const=True)
        elif kind == "int":
            kwargs.update(type=int)
        elif kind == "enum":
            kwargs.update(type=str, choices=list(row.get("choices", [])))
        else:
            kwargs.update(type=str)
        parser.add_argument("--" + str(row["name"]), **kwargs)  # type: ignore[arg-type]


class SundialOptions(PipelineOptions):  # type: ignore[misc]  # Beam is untyped (Any)
    """Every ``beam:option:sundial_*:v1`` the Sundial runner reads, as ``--sundial_*`` flags.

    ``options.view_as(SundialOptions).sundial_clock`` reads one back.
    """

    @classmethod
    def _add_argparse_args(cls, parser: argparse.ArgumentParser) -> None:
        add_arguments(parser, option_table())
