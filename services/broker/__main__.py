"""`python -m services.broker`: run one broker with settings from the environment.

A broker under a controller that is given a new role (promoted, or fenced and to follow a new
master) asks for its app to be built again: the server stops, and a new app starts with the role
(a slave's run and etcd lease handed over to it: services.broker.controller_link).
"""

import logging

from libs.http.serve import serve
from libs.http.stopping import restart_reason
from services.broker.app import create_app
from services.broker.settings import BrokerSettings

log = logging.getLogger("services.broker")


def main() -> None:
    handover = None
    while True:
        settings = BrokerSettings()
        app = create_app(settings, handover=handover)
        serve(app, settings)
        handover = getattr(app.state, "controller_handover", None)
        reason = restart_reason(app)
        if reason is None:
            return
        log.warning("starting again: %s", reason)


if __name__ == "__main__":
    main()
