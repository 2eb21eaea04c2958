"""CI runs what the README tells a newcomer to run: the same install and the same test
command, and it installs the browser the HTML report's test needs."""

import re

from conftest import ROOT

CI = (ROOT / ".ci" / "run").read_text()
README = (ROOT / "README.md").read_text()
INSTALL = re.compile(r"pip install -e '(\.\[[^\]]*\])'")


def _extras(text: str) -> set[str]:
    return {m.group(1) for m in INSTALL.finditer(text) if "test" in m.group(1)}


def test_the_readme_test_command_is_the_one_ci_runs():
    (ci,) = _extras(CI)
    assert _extras(README) == {ci}, "the README's test install differs from .ci/run's"
    assert f"pip install -e '{ci}' && python -m pytest" in README
    assert CI.rstrip().endswith("python -m pytest")


def test_ci_installs_chromium_and_skips_only_without_apt_get():
    assert "apt-get install -y -qq chromium" in CI
    install = CI.index("apt-get install")
    assert CI.rindex("command -v apt-get", 0, install) < install  # only where apt-get is
    assert "no apt-get on this machine" in CI
