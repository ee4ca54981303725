"""generate modes (gasoline.tools.generate): artifacts from the buffers, schema-valid HAR and
SARIF, and save_to's path checks."""

from __future__ import annotations

import json
import os
from pathlib import Path

import jsonschema
import pytest
from referencing import Registry, Resource
from referencing.jsonschema import DRAFT6

from _modes_harness import fired, parse
from gasoline.analysis import make_checkpoint
from gasoline.core.errors import GasolineError
from gasoline.core.storage.store import ACTIONS, CONSOLE, NETWORK_BODIES, WATERFALL
from gasoline.tools._artifacts import MAX_ARTIFACT_BYTES, write_artifact
from gasoline.tools.generate import MODES

SCHEMAS = Path(__file__).parent / "schemas"
T0 = 1_767_225_600_000


def _har_validator():
    resources = []
    for path in (SCHEMAS / "har").glob("*.json"):
        contents = json.loads(path.read_text())
        for name in (path.name, path.name + "#"):
            resources.append((name, Resource.from_contents(contents, default_specification=DRAFT6)))
    schema = json.loads((SCHEMAS / "har" / "har.json").read_text())
    return jsonschema.Draft6Validator(schema, registry=Registry().with_resources(resources),
                                      format_checker=jsonschema.Draft6Validator.FORMAT_CHECKER)


HAR = _har_validator()
SARIF = jsonschema.Draft4Validator(json.loads((SCHEMAS / "sarif-2.1.0-rtm.5.json").read_text()),
                                   format_checker=jsonschema.Draft4Validator.FORMAT_CHECKER)


def assert_valid(validator, doc):
    errors = sorted(validator.iter_errors(doc), key=lambda e: list(e.path))
    assert not errors, [f"{list(e.path)}: {e.message}" for e in errors[:5]]


def run(h, mode, args=None, client="A", cwd=None):
    return h.run(MODES, mode, args, client_id=client, tool="generate", cwd=cwd)


def _capture(h):
    h.app.store.add(NETWORK_BODIES, [
        {"method": "POST", "url": "https://app.test/api/login", "status": 200,
         "content_type": "application/json", "ts": T0,
         "request_body": json.dumps({"user": "bob", "password": "hunter2"}),
         "response_body": '{"ok": true}',
         "request_headers": {"Authorization": "Bearer abc.def.ghi123456"}},
        {"method": "GET", "url": "https://cdn.example.com/lib.js", "status": 200,
         "content_type": "application/javascript", "response_body": "console.log(1)", "ts": T0},
    ])
    h.app.store.add(WATERFALL, [
        {"name": "https://cdn.example.com/lib.js", "url": "https://cdn.example.com/lib.js",
         "initiator_type": "script", "duration": 20, "start_time": 5, "transfer_size": 100},
        {"name": "https://fonts.example.net/f.woff2", "url": "https://fonts.example.net/f.woff2",
         "initiator_type": "font", "duration": 20, "start_time": 9},
    ])
    h.app.store.add(ACTIONS, [
        {"type": "navigate", "to_url": "https://app.test/login", "timestamp": T0},
        {"type": "input", "selectors": {"css": "#user"}, "value": "bob", "timestamp": T0 + 1},
        {"type": "click", "selectors": {"testId": "submit"}, "timestamp": T0 + 2},
    ])
    h.app.store.add(CONSOLE, [{"level": "error", "message": "TypeError: boom", "ts": T0 + 3}])


def test_har_is_valid_har_1_2_and_redacted(h):
    _capture(h)
    summary, body = parse(run(h, "har"))
    doc = json.loads(body["artifact"])
    assert_valid(HAR, doc)
    assert body["entries"] == len(doc["log"]["entries"]) == 3
    assert "hunter2" not in body["artifact"] and "abc.def.ghi123456" not in body["artifact"]
    assert summary.startswith("HAR 1.2 with 3 entries")


def test_har_of_an_empty_capture_is_still_valid(h):
    _, body = parse(run(h, "har"))
    assert_valid(HAR, json.loads(body["artifact"]))


def test_sarif_from_a_provided_result_is_valid_sarif_2_1_0(h):
    a11y = {"url": "https://app.test/", "violations": [{
        "id": "image-alt", "impact": "critical", "help": "Images need alt text",
        "help_url": "https://dequeuniversity.com/rules/axe/4.8/image-alt", "tags": ["wcag2a"],
        "nodes": [{"target": ["img.logo"], "html": "<img class=logo>",
                   "failure_summary": "Fix: add alt"}]}]}
    summary, body = parse(fired(run(h, "sarif", {"a11y_result": a11y})))
    doc = json.loads(body["artifact"])
    assert_valid(SARIF, doc)
    assert body["results"] == 1
    rule = doc["runs"][0]["tool"]["driver"]["rules"][0]
    assert rule["helpUri"] == "https://dequeuniversity.com/rules/axe/4.8/image-alt"
    assert "Fix: add alt" in json.dumps(doc["runs"][0]["results"][0])
    assert h.commands() == []  # nothing asked of the extension
    assert summary.startswith("SARIF 2.1.0 with 1 result(s)")


def test_sarif_without_a_result_runs_the_extensions_a11y_audit(h):
    d = run(h, "sarif", {"tags": ["wcag2aa"]})
    [cmd] = h.commands()
    assert cmd.type == "a11y" and cmd.params == {"tags": ["wcag2aa"]}
    h.answer(cmd, {"url": "https://app.test/", "violations": [
        {"id": "label", "impact": "serious", "help": "Form elements need labels",
         "nodes": [{"target": ["#q"], "html": "<input id=q>"}, {"target": ["#r"], "html": "<input>"}]}]})
    _, body = parse(fired(d))
    assert_valid(SARIF, json.loads(body["artifact"]))
    assert body["results"] == 2


def test_sarif_rejects_a_result_that_is_not_an_object(h):
    with pytest.raises(GasolineError) as e:
        run(h, "sarif", {"a11y_result": [1, 2]})
    assert e.value.code == "invalid_param"


def test_reproduction_and_test_replay_the_recorded_actions(h):
    _capture(h)
    _, repro = parse(run(h, "reproduction"))
    assert "page.goto(\"https://app.test/login\")" in repro["artifact"]
    assert "page.getByTestId(\"submit\").click()" in repro["artifact"]
    _, test = parse(run(h, "test", {"test_name": "login works"}))
    assert "test(\"login works\"" in test["artifact"]
    assert "TypeError: boom" in test["artifact"]


def test_csp_sri_and_pr_summary(h):
    _capture(h)
    _, csp = parse(run(h, "csp"))
    assert "script-src 'self' https://cdn.example.com" in csp["artifact"]
    assert "font-src 'self' https://fonts.example.net" in csp["artifact"]
    _, sri = parse(run(h, "sri"))
    assert sri["resources"][0]["url"] == "https://cdn.example.com/lib.js"
    assert 'integrity="sha384-' in sri["artifact"]
    h.ctx("A").state.checkpoints["start"] = make_checkpoint(
        "start", {n: 0 for n in h.app.store.buffers}, h.clock.seconds())
    _, pr = parse(run(h, "pr_summary", {"checkpoint": "start", "title": "Fix login"}))
    assert pr["artifact"].startswith("## Fix login")
    assert "Since checkpoint `start`" in pr["artifact"]


def test_save_to_writes_inside_the_agents_working_directory(h, tmp_path):
    repo = tmp_path / "repo"
    repo.mkdir()
    _capture(h)
    summary, body = parse(run(h, "har", {"save_to": "out/session.har"}, cwd=str(repo)))
    path = repo / "out" / "session.har"
    assert body["saved_to"] == str(path.resolve())
    assert_valid(HAR, json.loads(path.read_text()))
    assert summary.endswith(f"saved to {path.resolve()}")


def test_save_to_without_a_cwd_goes_to_the_state_dirs_artifacts(h, tmp_path):
    _, body = parse(run(h, "csp", {"save_to": "policy.txt"}))
    saved = Path(body["saved_to"])
    assert saved == (tmp_path / "state" / "artifacts" / "policy.txt").resolve()
    assert saved.read_text().startswith("default-src 'self'")


@pytest.mark.parametrize("save_to", ["../escape.txt", "sub/../../escape.txt", "/etc/passwd",
                                     "/tmp/elsewhere.txt", ""])
def test_save_to_refuses_paths_outside_the_allowed_roots(h, tmp_path, save_to):
    repo = tmp_path / "repo"
    repo.mkdir()
    with pytest.raises(GasolineError) as e:
        run(h, "csp", {"save_to": save_to}, cwd=str(repo))
    assert e.value.code == "path_refused"
    assert not (tmp_path / "escape.txt").exists()


def test_save_to_refuses_a_symlink_that_points_outside(h, tmp_path):
    repo = tmp_path / "repo"
    repo.mkdir()
    outside = tmp_path / "outside"
    outside.mkdir()
    os.symlink(outside, repo / "link")
    (repo / "file-link").symlink_to(outside / "target.txt")
    for save_to in ("link/x.txt", "file-link", str(repo / "link" / "y.txt")):
        with pytest.raises(GasolineError) as e:
            run(h, "csp", {"save_to": save_to}, cwd=str(repo))
        assert e.value.code == "path_refused", save_to
    assert list(outside.iterdir()) == []


def test_save_to_refuses_a_directory(h, tmp_path):
    repo = tmp_path / "repo"
    (repo / "dir").mkdir(parents=True)
    with pytest.raises(GasolineError) as e:
        run(h, "csp", {"save_to": "dir"}, cwd=str(repo))
    assert e.value.code == "path_refused"


def test_save_to_refuses_artifacts_over_the_size_limit(h, tmp_path):
    repo = tmp_path / "repo"
    repo.mkdir()
    ctx = h.ctx("A", tool="generate", mode="har", cwd=str(repo))
    with pytest.raises(GasolineError) as e:
        write_artifact(ctx, "big.txt", "x" * (MAX_ARTIFACT_BYTES + 1))
    assert e.value.code == "invalid_param"
    assert not (repo / "big.txt").exists()


def test_every_issue_4_generate_mode_has_a_handler():
    assert {"reproduction", "test", "har", "csp", "sri", "sarif", "pr_summary"} <= set(MODES)


def test_a_large_saved_artifact_is_only_previewed_in_the_answer(h, tmp_path):
    repo = tmp_path / "repo"
    repo.mkdir()
    h.app.store.add(NETWORK_BODIES, [
        {"method": "GET", "url": f"https://app.test/api/{i}", "status": 200,
         "response_body": "x" * 2000} for i in range(40)])
    _, body = parse(run(h, "har", {"save_to": "big.har"}, cwd=str(repo)))
    saved = (repo / "big.har").read_text()
    assert len(saved) > 80_000 and len(json.loads(saved)["log"]["entries"]) == 40
    assert len(body["artifact"]) == 20_000 and saved.startswith(body["artifact"])
    assert body["artifact_truncated"]
