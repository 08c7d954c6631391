"""`python -m services.push`: run the push service with settings from the environment."""

from libs.http.serve import serve
from services.push.app import create_app
from services.push.settings import PushSettings

if __name__ == "__main__":
    settings = PushSettings()
    serve(create_app(settings), settings)
