"""`python -m services.nameserver`: run one nameserver with settings from the environment."""

from libs.http.serve import serve
from services.nameserver.app import create_app
from services.nameserver.settings import NameserverSettings

if __name__ == "__main__":
    settings = NameserverSettings()
    serve(create_app(settings), settings)
