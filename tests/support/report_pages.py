"""Reading the ETL's HTML report in tests: its embedded images and its tables."""

from __future__ import annotations

import re

IMAGE = re.compile(r'src="data:image/png;base64,([A-Za-z0-9+/=]+)"')


def tables_of(page: str) -> list[list[list[str]]]:
    """Each <table> of the page: its rows (the header's first), each a list of the cells' text."""
    return [
        [re.findall(r"<t[hd][^>]*>(.*?)</t[hd]>", row) for row in re.findall(r"<tr>(.*?)</tr>", table)]
        for table in re.findall(r"<table>(.*?)</table>", page)
    ]
