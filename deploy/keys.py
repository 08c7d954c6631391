"""`petrel keys create|list|revoke`: manage API keys straight in the cluster's metadata database.

For the operator on a host that holds the database (the first admin key is made so);
with a key, `POST /v1/keys` does the same through any gateway. The database is
PETREL_DATABASE_URL, else <data dir>/metadata.db. Key changes are audit events
(service `cli`) under the data dir.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from libs.auth.keys import KeyStore, open_key_engine
from libs.errors import PetrelError
from libs.events.writer import EventWriter
from libs.settings import SharedDatabaseSettings


def add_arguments(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    k = sub.add_parser("keys", help="create, list and revoke API keys (in the cluster's metadata database)")
    k.add_argument("--data-dir", type=Path, help="the cluster's data dir (default: $PETREL_DATA_DIR, else ./data)")
    tools = k.add_subparsers(dest="tool", required=True)
    c = tools.add_parser("create", help="create a key and print it (shown this once)")
    c.add_argument("--name", required=True, help="what the key is for, e.g. billing-service")
    c.add_argument(
        "--allow",
        action="append",
        required=True,
        metavar="GRANT",
        help="pub[:pattern], sub[:pattern], admin[:pattern]; a pattern may start topic/ or group/ (repeat)",
    )
    c.add_argument("--deny", action="append", default=[], metavar="GRANT", help="beats any allow (repeat)")
    c.add_argument(
        "--rate", type=float, help="calls a second across the cluster (0: unlimited; default: the gateway's)"
    )
    c.add_argument("--json", action="store_true", help="print the key and its details as JSON")
    listing = tools.add_parser("list", help="every key, revoked ones included; never a secret")
    listing.add_argument("--json", action="store_true")
    r = tools.add_parser("revoke", help="revoke a key: gateways refuse it within seconds")
    r.add_argument("key_id")


def run(args: argparse.Namespace) -> int:
    settings = SharedDatabaseSettings(**({"data_dir": args.data_dir} if args.data_dir else {}))
    engine = open_key_engine(settings.metadata_url)
    store = KeyStore(engine)
    events = EventWriter(settings.data_dir / "export", "cli", enabled=settings.events_enabled)
    try:
        if args.tool == "create":
            key, text = store.create(args.name, args.allow, args.deny, rate_per_second=args.rate, created_by="cli")
            events.emit("audit", action="key_created", status=201, key_id=key.key_id, key_name=key.name)
            if args.json:
                print(json.dumps(key.public_fields() | {"key": text}))
            else:
                print(text)
                print(
                    f"# key {key.key_id} ({key.name}): {' '.join(key.allow)}; shown once, keep it secret",
                    file=sys.stderr,
                )
        elif args.tool == "list":
            keys = store.list_keys()
            if args.json:
                print(json.dumps([k.public_fields() for k in keys]))
            for key in [] if args.json else keys:
                state = "revoked" if key.revoked else "active"
                deny = f" deny {' '.join(key.deny)}" if key.deny else ""
                print(f"{key.key_id}  {key.name:24} {state:8} allow {' '.join(key.allow)}{deny}")
        else:
            key = store.revoke(args.key_id)
            events.emit("audit", action="key_revoked", status=204, key_id=key.key_id, key_name=key.name)
            print(f"revoked {key.key_id} ({key.name})")
    except PetrelError as exc:
        print(f"petrel keys {args.tool}: {exc.detail}", file=sys.stderr)
        return 1
    finally:
        events.flush()
        engine.dispose()
    return 0
