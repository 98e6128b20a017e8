"""``python -m workers.codec freeze TYPE...``: keep today's wire form of TYPE readable.

Run it *before* changing a schema: it writes the current self-contained schema of TYPE and
of every type containing it to ``schemas/history/<name>.<fingerprint>.avsc``, so records
already on the bus still decode (into the new shape) after the change.
``python -m workers.codec list`` prints every type with its fingerprint.
"""

from __future__ import annotations

import argparse
import json
import sys

from workers.codec.codec import Codec
from workers.codec.schemas import HISTORY_DIR, dependents


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m workers.codec")
    sub = parser.add_subparsers(dest="command", required=True)
    sub.add_parser("list", help="types and fingerprints")
    freeze = sub.add_parser("freeze", help="snapshot TYPE (and types containing it) into schemas/history")
    freeze.add_argument("types", nargs="+")
    args = parser.parse_args(argv)
    codec = Codec()
    if args.command == "list":
        for name in codec.names:
            print(f"{codec.fingerprint(name).hex()}  {name}")
        return 0
    names: set[str] = set()
    for requested in args.types:
        names |= dependents(codec.resolve(requested), codec.definitions)
    HISTORY_DIR.mkdir(parents=True, exist_ok=True)
    for name in sorted(names):
        path = HISTORY_DIR / f"{name}.{codec.fingerprint(name).hex()}.avsc"
        if not path.exists():
            path.write_text(json.dumps(codec.schema(name), indent=2) + "\n")
            print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
