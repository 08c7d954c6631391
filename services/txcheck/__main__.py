"""`python -m services.txcheck`: run txcheck's health process with settings from the environment."""

from libs.http.serve import serve
from services.txcheck.app import create_app
from services.txcheck.settings import TxcheckSettings

if __name__ == "__main__":
    settings = TxcheckSettings()
    serve(create_app(settings), settings)
