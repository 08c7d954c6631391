"""`python -m services.broker`: run one broker with settings from the environment."""

from libs.http.serve import serve
from services.broker.app import create_app
from services.broker.settings import BrokerSettings

if __name__ == "__main__":
    settings = BrokerSettings()
    serve(create_app(settings), settings)
