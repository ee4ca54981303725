"""Hostile input for the analyze / generate / interact handlers: any JSON-ish arguments and any
extension answer give a result or a GasolineError (never another exception), and leave no command
or timer behind."""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from types import SimpleNamespace

from twisted.internet.defer import fail, succeed

from _modes_harness import Harness
from gasoline.core.errors import GasolineError
from gasoline.tools import analyze, generate, interact
from gasoline.tools._links import LinkValidator

TABLES = {"analyze": analyze.MODES, "generate": generate.MODES, "interact": interact.MODES}
CASES = [(tool, mode) for tool, table in TABLES.items() for mode in sorted(table)]

KEYS = ["selector", "element_id", "text", "value", "url", "urls", "tab_id", "key", "script",
        "world", "fields", "name", "attribute", "wait_for", "limit", "last_n", "checkpoint",
        "tags", "rules", "properties", "background", "timeout_ms", "save_to", "a11y_result",
        "checked", "storage_type", "max_age", "allow_private", "format", "quality",
        "duration_ms", "test_name", "title", "algorithm", "submit_selector", "navigate",
        # the media, healing and classification modes' own arguments
        "test_code", "test_file", "failure", "error_id", "message", "window_seconds", "threshold",
        "full_page", "live", "file_path", "files", "fps", "max_seconds", "recording_id",
        "pixel_threshold", "max_diff_ratio", "annotation_id"]

scalars = st.one_of(st.none(), st.booleans(), st.integers(-2**40, 2**40),
                    st.floats(allow_nan=True), st.text(max_size=30))
json_values = st.recursive(scalars, lambda inner: st.one_of(
    st.lists(inner, max_size=4), st.dictionaries(st.text(max_size=10), inner, max_size=4)),
    max_leaves=12)
arguments = st.dictionaries(st.sampled_from(KEYS), json_values, max_size=6)
answers = st.one_of(json_values, st.fixed_dictionaries({}, optional={
    "url": json_values, "count": json_values, "matches": json_values, "violations": json_values,
    "forms": json_values, "elements": json_values, "result": json_values, "element": json_values,
    "styles": json_values, "path": json_values, "local_storage": json_values,
    "form_values": json_values}))


@pytest.fixture(scope="module")
def harness(tmp_path_factory):
    h = Harness.create(tmp_path_factory.mktemp("hostile"))
    # link_validation: every host resolves to a public address; every fetch fails at once.
    h.app.tools.runtime.link_validator = LinkValidator(
        h.clock, lambda host: succeed(["93.184.216.34"]),
        lambda pins: SimpleNamespace(request=lambda *a, **kw: fail(ConnectionRefusedError())))
    yield h
    h.close()


# One test drawing (tool, mode) rather than a parametrized one: pytest-twisted re-wraps a
# hypothesis test's inner function once per parametrized item, which breaks the second item.
@settings(max_examples=800, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(case=st.sampled_from(CASES), args=arguments,
       replies=st.lists(answers, min_size=3, max_size=3), save=st.booleans())
def test_any_arguments_and_answers_give_a_result_or_a_gasoline_error(harness, case, args,
                                                                     replies, save):
    h = harness
    tool, mode = case
    if not save:
        args.pop("save_to", None)  # keep the filesystem out of most examples
    elif isinstance(args.get("save_to"), str):
        args["save_to"] = "hostile/" + args["save_to"].replace("\x00", "")
    outcome = []
    try:
        d = h.run(TABLES[tool], mode, args, client_id="hostile", tool=tool)
    except GasolineError:
        return
    if not hasattr(d, "addBoth"):
        assert isinstance(d, dict) and d["isError"] is False
        return
    d.addBoth(outcome.append)
    for reply in replies:
        for cmd in h.commands():
            h.answer(cmd, reply)
    for cmd in h.commands():  # composite modes may ask more than three times
        h.answer(cmd, status="error", error="enough")
    h.clock.advance(0)
    assert outcome, f"{tool} {mode} never answered"
    value = outcome[0]
    if hasattr(value, "check"):
        assert value.check(GasolineError), value.getTraceback()
    else:
        assert isinstance(value, dict) and value["isError"] is False
    assert h.app.router.pending_count("hostile") == 0


def test_extra_argument_schemas_are_valid_json_schema():
    import jsonschema

    for table in (analyze, generate, interact):
        jsonschema.Draft7Validator.check_schema({"type": "object", "properties": table.PROPERTIES})
        assert all(isinstance(v.get("type"), str) for v in table.PROPERTIES.values())
