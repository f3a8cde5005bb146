"""`thetalker-deploy`: print a deploy file's path, served model id or sample rate by name,
or list the names with their models (thetalker.lifecycle.deploy holds the files)."""

from __future__ import annotations

import argparse
import sys

from thetalker.lifecycle.deploy import ALIASES, UnknownDeployError, listing, resolve

__all__ = ["main"]


def _parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="thetalker-deploy",
        description="Print the path of a deploy file by name (or list the names and models).",
        epilog="Aliases: " + ", ".join(f"{a} = {n}" for a, n in sorted(ALIASES.items())),
    )
    parser.add_argument(
        "name", nargs="?", help="deploy name or alias; 'list' or none lists names and models"
    )
    what = parser.add_mutually_exclusive_group()
    what.add_argument("--model-id", action="store_true", help="print the served model id")
    what.add_argument("--sample-rate", action="store_true", help="print the sample rate (Hz)")
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = _parse_args(argv)
    if args.name in (None, "list"):
        print("\n".join(listing()))
        return 0
    try:
        entry = resolve(args.name)
    except UnknownDeployError as err:
        print(f"thetalker-deploy: {err}", file=sys.stderr)
        return 2
    if args.model_id:
        print(entry.model_id)
    elif args.sample_rate:
        print(entry.sample_rate)
    else:
        print(entry.path)
    return 0


if __name__ == "__main__":
    sys.exit(main())
