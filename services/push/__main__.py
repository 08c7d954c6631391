"""`python -m services.push`: run the push service with settings from the environment (`petrel serve push` too)."""

from libs.http.serve import serve
from services.push.app import create_app
from services.push.settings import PushSettings


def main() -> None:
    settings = PushSettings()
    serve(create_app(settings), settings)


if __name__ == "__main__":
    main()
