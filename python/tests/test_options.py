"""SundialOptions declares the runner's option table, and the options reach the runner."""

import json
import subprocess

import apache_beam as beam
import pytest
from apache_beam.options.pipeline_options import PipelineOptions

from sundial_beam import SundialOptions, option_table
from sundial_beam.options import read_binary_table


def test_declares_every_option_of_the_binary(sundial_binary: str) -> None:
    listed = json.loads(subprocess.run([sundial_binary, "--list-options"], check=True,
                                       capture_output=True, text=True).stdout)["options"]
    names = sorted(row["name"] for row in listed)
    assert len(names) >= 16
    declared = sorted(k for k in SundialOptions().get_all_options(retain_unknown_options=False)
                      if k.startswith("sundial_"))
    assert declared == names
    assert option_table() == read_binary_table(sundial_binary) == listed


def test_kinds_parse() -> None:
    opts = PipelineOptions([
        "--sundial_clock=wall", "--sundial_livelock_rounds=7", "--sundial_keep_artifacts",
        "--sundial_embed_input=false", "--sundial_memory_limit=512MiB",
    ]).view_as(SundialOptions)
    assert opts.sundial_clock == "wall"
    assert opts.sundial_livelock_rounds == 7
    assert opts.sundial_keep_artifacts is True
    assert opts.sundial_embed_input is False
    assert opts.sundial_memory_limit == "512MiB"
    assert opts.sundial_spill_dir is None


def test_bad_values_are_refused() -> None:
    with pytest.raises(SystemExit):
        PipelineOptions(["--sundial_clock=sundial"]).view_as(SundialOptions)
    with pytest.raises(SystemExit):
        PipelineOptions(["--sundial_livelock_rounds=many"]).view_as(SundialOptions)


def test_an_option_reaches_the_runner() -> None:
    # A bound the runner refuses fails the job, naming the option: it was sent and read.
    opts = PipelineOptions(["--runner=sundial_beam.SundialRunner",
                            "--sundial_livelock_rounds=-1"])
    with pytest.raises(Exception, match="sundial_livelock_rounds"):
        with beam.Pipeline(options=opts) as p:
            _ = p | beam.Create([1, 2]) | beam.Map(lambda x: x)
