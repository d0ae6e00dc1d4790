"""``python -m sqlfilter.explain [--selector] 'expression'``: what a filter compiles to.

``--selector`` reads the expression as a JMS selector (the selector dialect).

A debug dump for the SQL pipeline: the folded expression tree, the sections the filter reads and
the generated Python source, or the error with a caret under its position.
"""

from __future__ import annotations

import argparse
import sys

from sqlfilter.errors import FilterError
from sqlfilter.sql import compile_uncached

__all__ = ["main"]


def main(argv: list[str] | None = None) -> int:
    """Print the tree, sections and generated code of one expression; 1 if it is invalid."""
    parser = argparse.ArgumentParser(prog="python -m sqlfilter.explain",
                                     description=__doc__.splitlines()[0])
    parser.add_argument("--selector", action="store_true",
                        help="the JMS selector dialect (apache.org:selector-filter:string)")
    parser.add_argument("expression")
    args = parser.parse_args(argv)
    try:
        f = compile_uncached(args.expression, dialect="selector" if args.selector else "sql")
    except FilterError as err:
        print(f"invalid: {err}", file=sys.stderr)
        if err.position:
            print(f"  {args.expression}\n  {' ' * (err.position - 1)}^", file=sys.stderr)
        return 1
    print(f"tree:     {f.tree}")
    print(f"sections: {', '.join(sorted(f.sections)) or '(none)'}")
    print(f.source, end="")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
