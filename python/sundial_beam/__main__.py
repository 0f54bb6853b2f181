"""``python -m sundial_beam ARGS``: runs the bundled ``sundial`` with ARGS.

``python -m sundial_beam ctl ARGS`` runs the bundled ``sundialctl`` instead.
"""

import os
import sys
from typing import List, Optional

from sundial_beam._binary import binary_path, ctl_path


def _exec(path: str, args: List[str]) -> int:
    sys.stdout.flush()
    sys.stderr.flush()
    # Replace this process, so signals and the exit status are the binary's own.
    os.execv(path, [path] + args)
    return 127  # not reached


def main(argv: Optional[List[str]] = None) -> int:
    """``sundial`` (and ``python -m sundial_beam``); ``ctl ARGS`` runs ``sundialctl``."""
    args = list(sys.argv[1:] if argv is None else argv)
    if args[:1] == ["ctl"]:
        return _exec(ctl_path(), args[1:])
    return _exec(binary_path(), args)


def ctl_main(argv: Optional[List[str]] = None) -> int:
    """``sundialctl``: the bundled command-line client."""
    return _exec(ctl_path(), list(sys.argv[1:] if argv is None else argv))


if __name__ == "__main__":
    sys.exit(main())
