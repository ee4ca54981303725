"""gasoline.common: what the daemon and the connector must agree on, in one place."""

from __future__ import annotations

import os

from gasoline.common import client_id_for_cwd, unquote
from gasoline.connect import fast


def test_the_fast_first_exchange_derives_the_same_client_id(tmp_path, monkeypatch):
    """The first exchange gives the id every other part gives."""
    odd = tmp_path / "caf\u00e9 project"
    odd.mkdir()
    monkeypatch.chdir(odd)
    assert fast.client_id({}) == client_id_for_cwd(os.getcwd()) == client_id_for_cwd(odd)
    assert fast.client_id({"--client-id": "mine"}) == "mine"


def test_each_client_rule_is_written_once():
    """The daemon (gasoline.common) and the connector's first exchange apply the same functions of
    gasoline.client_rules, not copies."""
    from gasoline import client_rules, common

    for name in ("client_id_for_cwd", "client_proof", "read_client_key", "decode_client_key",
                 "default_state_dir_name", "read_nofollow"):
        assert getattr(common, name) is getattr(client_rules, name)
    for name in ("client_id_for_cwd", "client_proof", "read_client_key", "default_state_dir_name"):
        assert getattr(fast, name) is getattr(client_rules, name)


def test_unquote_strips_one_matching_pair_only():
    assert unquote('  "Sign in" ') == "Sign in"
    assert unquote("`x`") == "x"
    assert unquote("`x`", quotes="\"'") == "`x`"
    assert unquote("'a\"") == "'a\""
    assert unquote('"') == '"'
