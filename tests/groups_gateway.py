"""Runs ``tmsgate serve`` with the consumer-group routes, for the group tests.

    python tests/groups_gateway.py serve --store leveldb:///tmp/x --kafka-listen 127.0.0.1:0

Until handlers/__init__.py's ROUTES includes GROUP_ROUTES, this adds them (only the
API keys not already served) before the gateway builds its route table; afterwards it
is exactly ``tmsgate serve``.
"""

from __future__ import annotations

import sys


def main() -> int:
    from tmsgate.gateway.kafka import handlers
    from tmsgate.gateway.kafka.handlers.group_routes import GROUP_ROUTES

    served = {route.api_key for route in handlers.ROUTES}
    handlers.ROUTES.extend(r for r in GROUP_ROUTES if r.api_key not in served)

    from tmsgate.gateway.cli import main as cli_main

    return cli_main(sys.argv[1:])


if __name__ == "__main__":
    sys.exit(main())
