"""`python -m services.timer`: run the timer service with settings from the environment."""

from libs.http.serve import serve
from services.timer.app import create_app
from services.timer.settings import TimerSettings

if __name__ == "__main__":
    settings = TimerSettings()
    serve(create_app(settings), settings)
