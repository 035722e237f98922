"""The rule search and the decision, against the naive oracle and pywb's documented cases."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gateway.access.policy import AccessPolicy
from gateway.access.rules import AclFileError, RuleSet, parse_rule_line, read_rule_files
from gateway.access.settings import AccessConfig, Embargo
from gateway.access.timeutil import Period
from gateway.cdx.cdxj import CdxRecord
from tests.access.acl_oracle import OracleRule, decide

NOW = datetime(2026, 11, 28, tzinfo=UTC)

#: pywb's manual example (docs/manual/access-control.rst).
MANUAL = """\
org,httpbin)/anything/something - {"access": "allow", "url": "http://httpbin.org/anything/something"}
org,httpbin)/anything - {"access": "exclude", "url": "http://httpbin.org/anything"}
org,httpbin)/ - {"access": "block", "url": "httpbin.org/"}
com, - {"access": "allow", "url": "com,"}
"""


def _policy(text: str, tmp_path: Path, **config: object) -> AccessPolicy:
    path = tmp_path / "rules.aclj"
    path.write_text(text)
    return AccessPolicy.load(AccessConfig(acl_paths=(str(path),), **config))  # type: ignore[arg-type]


def test_the_manual_example_decides_as_the_manual_says(tmp_path: Path) -> None:
    policy = _policy(MANUAL, tmp_path, default_access="block")
    cases = {
        "org,httpbin)/anything/something": "allow",
        "org,httpbin)/anything/something/deeper": "allow",
        "org,httpbin)/anything": "exclude",
        "org,httpbin)/anything/else": "exclude",
        "org,httpbin)/": "block",
        "org,httpbin)/get": "block",
        "com,example)/": "allow",
        "net,example)/": "block",  # default_access
    }
    for urlkey, access in cases.items():
        assert policy.decide(urlkey, "20200101000000", None, NOW).access == access, urlkey


async def test_a_range_decided_once_is_decided_again_after_a_reload(tmp_path: Path) -> None:
    policy = _policy('com,example)/ - {"access": "allow"}\n', tmp_path)
    line = 'com,example)/ 20140127171200 {"url": "http://example.com/"}'
    gate = policy.gate("com,example)/", "com,example)/!")
    record = CdxRecord.parse(line)
    assert gate(record)
    assert record.to_cdxj().endswith('"access": "allow"}\n')
    assert policy.gate("com,example)/", "com,example)/!") is gate  # kept for the range
    assert policy.gate("com,example)/", "com,example)/!") is not policy.gate("com,", "com-")
    (tmp_path / "rules.aclj").write_text('com,example)/ - {"access": "exclude"}\n')
    for _ in range(200):  # the files are looked at once a second, reloaded in a thread
        await asyncio.sleep(0.05)
        if not policy.gate("com,example)/", "com,example)/!")(CdxRecord.parse(line)):
            break
    else:
        raise AssertionError("the exclude rule was not in force after 10 s")
    assert policy.decisions["exclude"] == 1  # and one allow per lookup before the reload


def test_exact_rules_apply_to_their_key_only_and_win_over_prefixes(tmp_path: Path) -> None:
    policy = _policy(
        'com,example)/a### - {"access": "allow"}\ncom,example)/a - {"access": "exclude"}\n',
        tmp_path,
    )
    assert policy.decide("com,example)/a", "2020", None, NOW).access == "allow"
    assert policy.decide("com,example)/a/b", "2020", None, NOW).access == "exclude"


def test_a_users_rule_applies_to_that_user_only(tmp_path: Path) -> None:
    policy = _policy(
        'com,example)/restricted - {"access": "block"}\n'
        'com,example)/restricted - {"access": "allow", "user": "staff"}\n',
        tmp_path,
    )
    assert policy.decide("com,example)/restricted", "2020", None, NOW).access == "block"
    assert policy.decide("com,example)/restricted", "2020", "staff", NOW).access == "allow"
    assert policy.decide("com,example)/restricted", "2020", "other", NOW).access == "block"


def test_rule_dates_fall_back_to_default_access_as_pywb_check_date_access(tmp_path: Path) -> None:
    policy = _policy(
        'com,example)/restricted - {"access": "allow", "before": "20101201"}\n',
        tmp_path,
        default_access="block",
    )
    # "20101201" is padded up (warcio): 2010-12-01 23:59:59
    assert policy.decide("com,example)/restricted", "20101201120000", None, NOW).access == "allow"
    assert policy.decide("com,example)/restricted", "20101202000000", None, NOW).access == "block"


def test_embargo_yields_to_allow_ignore_embargo_only(tmp_path: Path) -> None:
    embargo = Embargo(kind="newer", period=Period(years=1))
    policy = _policy(
        'com,example)/open - {"access": "allow_ignore_embargo"}\n'
        'com,example)/ - {"access": "allow"}\n',
        tmp_path,
        embargo=embargo,
    )
    recent, old = "20260601000000", "20200101000000"
    assert policy.decide("com,example)/page", recent, None, NOW).access == "exclude"
    assert policy.decide("com,example)/page", old, None, NOW).access == "allow"
    assert policy.decide("com,example)/open", recent, None, NOW).access == "allow"


def test_the_access_window_and_message_of_outbackcdx(tmp_path: Path) -> None:
    policy = _policy(
        'com,example)/ - {"access": "block", "message": "Under review", '
        '"access_from": "2026-11-01", "access_until": "2026-12-01T00:00:00Z", '
        '"reason": "takedown", "comment": "ticket 12", "modified_by": "ana", '
        '"modified_at": "2026-11-01T10:00:00Z"}\n',
        tmp_path,
    )
    inside = policy.decide("com,example)/", "2020", None, NOW)
    assert (inside.access, inside.rule and inside.rule.message) == ("block", "Under review")
    after = datetime(2026, 12, 1, tzinfo=UTC)
    assert policy.decide("com,example)/", "2020", None, after).access == "allow"


@pytest.mark.parametrize(
    ("line", "problem"),
    [
        ("com,example)/", "expected '<surt> - {json}'"),
        ('com,example)/ - {"access": "hide"}', "access 'hide'"),
        ('com,example)/ - {"access": "allow", "colour": 1}', "unknown key 'colour'"),
        ('com,example)/ - {"access": "allow", "before": "2020-01"}', "before"),
        ('com,example)/ - {"access": "allow", "newer": {"decades": 1}}', "newer.decades"),
        ('com,example)/ - {"access": ', "bad JSON block"),
    ],
)
def test_a_bad_line_names_its_file_and_line(tmp_path: Path, line: str, problem: str) -> None:
    path = tmp_path / "bad.aclj"
    path.write_text('org,iana)/ - {"access": "allow"}\n\n' + line + "\n")
    with pytest.raises(AclFileError) as caught:
        read_rule_files([str(path)])
    assert caught.value.path == str(path)
    assert caught.value.line == 3
    assert problem in str(caught.value)


def test_a_directory_holds_every_aclj_file(tmp_path: Path) -> None:
    (tmp_path / "a.aclj").write_text('com,a)/ - {"access": "block"}\n')
    (tmp_path / "b.aclj").write_text('com,b)/ - {"access": "exclude"}\n')
    (tmp_path / "notes.txt").write_text("not rules\n")
    rules = read_rule_files([str(tmp_path)])
    assert len(rules) == 2


# ------------------------------------------------------------------ the search vs the oracle
KEYS = st.sampled_from(
    [
        "com,",
        "com,example)/",
        "com,example)/a",
        "com,example)/a/b",
        "com,example)/ab",
        "com,example,www)/",
        "org,iana)/",
        "org,iana)/_css",
        "org,iana)/about",
        "*,",
    ]
)
RULES = st.lists(
    st.builds(
        OracleRule,
        key=KEYS,
        access=st.sampled_from(["allow", "block", "exclude", "allow_ignore_embargo"]),
        exact=st.booleans(),
        user=st.sampled_from([None, None, "staff"]),
        before=st.sampled_from([None, None, "20140126200700"]),
    ),
    max_size=12,
)
URLKEYS = st.sampled_from(
    [
        "com,example)/",
        "com,example)/a",
        "com,example)/a/b/c",
        "com,example)/abc",
        "com,example)/b",
        "com,example,www)/x",
        "org,iana)/",
        "org,iana)/_css/print.css",
        "org,iana)/about",
        "net,x)/",
    ]
)


@settings(max_examples=300, deadline=None)
@given(
    rules=RULES,
    urlkey=URLKEYS,
    timestamp=st.sampled_from(["20140126200624", "20140126200900"]),
    user=st.sampled_from([None, "staff", "other"]),
    default=st.sampled_from(["allow", "block", "exclude"]),
)
def test_the_search_decides_as_the_naive_oracle(
    rules: list[OracleRule], urlkey: str, timestamp: str, user: str | None, default: str
) -> None:
    ruleset = RuleSet(parse_rule_line(rule.line()) for rule in rules)
    policy = AccessPolicy(AccessConfig(default_access=default), ruleset)  # type: ignore[arg-type]
    want = decide(rules, urlkey, timestamp, default=default, user=user)
    assert policy.decide(urlkey, timestamp, user, NOW).access == want
