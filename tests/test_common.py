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


def test_base64url_without_the_base64_module_is_base64s():
    """client_rules writes base64url with binascii (the base64 module imports re, a cost of the
    connector's start); it is the base64 module's, and the key file's decoding agrees."""
    import base64

    import pytest
    from hypothesis import given, settings
    from hypothesis import strategies as st

    from gasoline.client_rules import b64url, decode_client_key, encode_client_key

    @settings(max_examples=300, deadline=None)
    @given(st.binary(max_size=80))
    def check(data):
        assert b64url(data) == base64.urlsafe_b64encode(data).rstrip(b"=")

    check()

    @settings(max_examples=200, deadline=None)
    @given(st.binary(min_size=32, max_size=32), st.sampled_from([b"", b"\n", b" \n", b"="]))
    def round_trip(key, tail):
        line = encode_client_key(key)
        assert line == base64.urlsafe_b64encode(key).rstrip(b"=") + b"\n"
        if tail == b"=":  # padding is not the canonical form: refused
            with pytest.raises(ValueError):
                decode_client_key(line.strip() + tail)
        else:
            assert decode_client_key(line.strip() + tail) == key

    round_trip()
    for bad in (b"", b"not base64!", base64.standard_b64encode(bytes(range(200, 232))),
                b"A" * 43 + b"+", b"A" * 44):
        with pytest.raises(ValueError):
            decode_client_key(bad)
