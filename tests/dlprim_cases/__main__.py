"""Write DLPrimitives' test files: ``python -m dlprim_cases OUT_DIR [--case NAME ...]
[--limit ELEMENTS]`` from the tests folder (DLPrimitives' test_from_template reads them
too)."""
import argparse
import os
import sys

from .case_builder import Sizes
from .generate import FILES, write


def main(argv=None):
    parser = argparse.ArgumentParser(prog="python -m dlprim_cases", description=__doc__)
    parser.add_argument("out_dir", help="folder for the test_case_<name>.json files")
    parser.add_argument("--case", action="append", choices=sorted(FILES),
                        help="a file to write (repeatable; default: all)")
    parser.add_argument("--limit", type=int, default=None,
                        help="leave out cases with a tensor of more elements (default: none)")
    args = parser.parse_args(argv)
    os.makedirs(args.out_dir, exist_ok=True)
    for name in args.case or sorted(FILES):
        try:
            print(write(name, args.out_dir, Sizes(args.limit)))
        except FileExistsError as err:
            print("python -m dlprim_cases: %s" % err, file=sys.stderr)
            return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
