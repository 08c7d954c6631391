"""`python -m services.timer`: run the timer service with settings from the environment (`petrel serve timer` too)."""

from libs.http.serve import serve
from services.timer.app import create_app
from services.timer.settings import TimerSettings


def main() -> None:
    settings = TimerSettings()
    serve(create_app(settings), settings)


if __name__ == "__main__":
    main()
