"""The training frameworks are named once (torchpace/frameworks.py): the capture records the
names lint and the doctor read, and the AMP advice lint gives (TP306) is the doctor's (TP307)."""

from torchpace import frameworks
from torchpace.capture.frameworks import DRIVERS
from torchpace.doctor.frameworks import FIXES
from torchpace.lint.frameworks import AMP_BY_FRAMEWORK


def test_the_capture_records_the_names_lint_and_the_doctor_read():
    assert {name for name, _ in DRIVERS} == set(frameworks.AMP_SETTING)
    assert set(AMP_BY_FRAMEWORK) == set(frameworks.AMP_SETTING)


def test_lint_and_the_doctor_give_the_same_amp_setting():
    for name, setting in frameworks.AMP_SETTING.items():
        assert FIXES["TP307"][name] == setting
        assert setting in AMP_BY_FRAMEWORK[name]
    assert 'Trainer(precision="bf16-mixed")' in frameworks.AMP_SETTING[frameworks.LIGHTNING]
