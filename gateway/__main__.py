"""`python -m gateway`: run the gateway with settings from the environment."""

from gateway.app import create_app
from gateway.settings import GatewaySettings
from libs.http.request_log import plain_lines
from libs.http.serve import serve

if __name__ == "__main__":
    settings = GatewaySettings()
    if settings.request_log:
        plain_lines()  # each line a JSON document, without the log format's prefix
    serve(create_app(settings), settings, reuse_port=settings.reuse_port)
