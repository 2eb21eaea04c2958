"""Checks every HTML report must pass: self-contained (nothing fetched from a network)."""

import re
from html.parser import HTMLParser

# Attributes through which a page loads something.
LOADING_ATTRIBUTES = {"src", "href", "data", "poster", "action", "srcset", "xlink:href"}
NETWORK = re.compile(r"^\s*(?:https?:|ftp:|//)", re.IGNORECASE)
CSS_NETWORK = re.compile(r"(?:url\(\s*['\"]?\s*(?:https?:|//)|@import)", re.IGNORECASE)


class _Loads(HTMLParser):
    def __init__(self):
        super().__init__()
        self.network: list[str] = []
        self.tags: list[str] = []
        self._in_style = False

    def handle_starttag(self, tag, attrs):
        self.tags.append(tag)
        self._in_style = tag == "style"
        for name, value in attrs:
            if name in LOADING_ATTRIBUTES and value and NETWORK.match(value):
                self.network.append(f"<{tag} {name}={value}>")
            if name == "style" and value and CSS_NETWORK.search(value):
                self.network.append(f"<{tag} style={value}>")

    def handle_endtag(self, tag):
        self._in_style = False

    def handle_data(self, data):
        if self._in_style and CSS_NETWORK.search(data):
            self.network.append("a stylesheet loading from the network")


def network_loads(page: str) -> list[str]:
    """What the page would fetch from a network: every tag attribute and stylesheet rule
    that loads a resource (plotly.js's own source mentions URLs it uses only for map
    charts, which torchpace never draws; those are strings in a script, not loads)."""
    parser = _Loads()
    parser.feed(page)
    return parser.network


def scripts_with_src(page: str) -> list[str]:
    return re.findall(r"<script[^>]*\ssrc=", page, flags=re.IGNORECASE)
