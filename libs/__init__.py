"""The code the services share. Importing it installs the finder of compiled hot modules (libs.compiled)."""

from libs.compiled import install

install()
