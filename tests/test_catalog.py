import re

from conftest import ROOT

from torchpace.catalog import CODES, FAMILIES, get

PRACTICE_IDS = {f"P{i:02d}" for i in range(1, 39)}


def test_codes_are_well_formed_and_unique():
    names = [c.name for c in CODES.values()]
    assert len(names) == len(set(names))
    for code, entry in CODES.items():
        assert re.fullmatch(r"TP\d{3}", code)
        assert code[2] in FAMILIES
        assert re.fullmatch(r"[a-z0-9]+(-[a-z0-9]+)*", entry.name)
        assert set(entry.practices) <= PRACTICE_IDS
        assert set(entry.seen_by) <= {"doctor", "lint"}


def test_every_code_has_its_docs_page():
    missing = [c.doc_path for c in CODES.values() if not (ROOT / c.doc_path).is_file()]
    assert not missing, f"docs pages missing: {missing}"


def test_get_names_unknown_codes():
    assert get("tp101").code == "TP101"
    try:
        get("TP000")
    except KeyError as e:
        assert "TP000" in str(e) and "TP101" in str(e)
    else:
        raise AssertionError("unknown code accepted")
