"""Ferry's keys (store/keys.py) and the store's secrets, sealed with them (docs/secrets.md)."""

from __future__ import annotations

import multiprocessing
import stat
from pathlib import Path

import pytest

from store.keys import (
    ENV_KEY_FILE,
    ENV_KEYS,
    HOME_KEY_FILE,
    SealError,
    id_of_key,
    keys_of,
    load_keys,
    new_key_line,
    parse_keys,
)
from store.models import SecretRecord
from store.repository import Store
from store.secret_repository import open_secret, seal_secret


def _load_in(home: str, results: multiprocessing.Queue[str]) -> None:
    results.put(load_keys({"FERRY_HOME": home}).current)


def test_the_home_key_is_made_once_private_whoever_asks_first(tmp_path: Path) -> None:
    home = tmp_path / "home"
    context = multiprocessing.get_context("fork")
    results: multiprocessing.Queue[str] = context.Queue()
    children = [context.Process(target=_load_in, args=(str(home), results)) for _ in range(4)]
    for child in children:
        child.start()
    for child in children:
        child.join(30)
    ids = {results.get(timeout=5) for _ in children}
    assert len(ids) == 1  # they all use the one key that was made
    key_file = home / HOME_KEY_FILE
    assert stat.S_IMODE(key_file.stat().st_mode) == 0o600
    assert [path.name for path in home.iterdir()] == [HOME_KEY_FILE]  # no temporary file left
    assert load_keys({"FERRY_HOME": str(home)}).current == ids.pop()


def test_keys_from_the_environment_or_a_file_first_one_sealing(tmp_path: Path) -> None:
    new, old = new_key_line(), new_key_line()
    from_env = load_keys({ENV_KEYS: f"{new}, {old}", "FERRY_HOME": str(tmp_path / "unused")})
    key_file = tmp_path / "keys"
    key_file.write_text(f"# rotated\n{new}\n{old}  # the previous one\n")
    from_file = load_keys({ENV_KEY_FILE: str(key_file), "FERRY_HOME": str(tmp_path / "unused")})
    assert from_env.ids == from_file.ids and len(from_env.ids) == 2
    assert not (tmp_path / "unused").exists()  # a key given is never joined by one made


def test_rotation_seals_with_the_new_key_and_opens_with_the_old(tmp_path: Path) -> None:
    old, new = new_key_line(), new_key_line()
    before = load_keys({ENV_KEYS: old})
    key_id, sealed = before.seal(b"value", b"context")
    after = load_keys({ENV_KEYS: f"{new},{old}"})
    assert after.current != key_id == before.current
    assert after.unseal(key_id, sealed, b"context") == b"value"
    assert after.seal(b"value")[0] == after.current
    with pytest.raises(SealError, match=f"sealed with key {key_id}, which is not among"):
        load_keys({ENV_KEYS: new}).unseal(key_id, sealed, b"context")
    with pytest.raises(SealError, match="does not open"):
        after.unseal(key_id, sealed, b"another context")


@pytest.mark.parametrize(
    ("text", "says"),
    [
        ("", "holds no key"),
        ("# nothing\n", "holds no key"),
        ("not base64!", "key 1 of K is not base64"),
        ("c2hvcnQ=", "key 1 of K has 5 bytes, not 32"),
    ],
)
def test_bad_keys_are_refused_saying_which(text: str, says: str) -> None:
    with pytest.raises(SealError, match=says):
        parse_keys(text, "K")


def test_a_key_id_tells_nothing_of_the_key() -> None:
    key = bytes(32)
    assert key.hex() not in id_of_key(key) and len(id_of_key(key)) == 16


def test_secrets_are_stored_sealed_and_bound_to_their_name(store: Store, db_url: str) -> None:
    keys = keys_of([bytes(range(32))])
    store.put_secret(seal_secret(keys, "main", "HF_TOKEN", "hf_value-1", now=1.0))
    store.put_secret(seal_secret(keys, "main", "HF_TOKEN", "hf_value-2", now=2.0))  # changed
    store.put_secret(seal_secret(keys, "other", "HF_TOKEN", "elsewhere", now=3.0))
    [record] = store.list_secrets("main")
    assert (record.name, record.created_at, record.updated_at) == ("HF_TOKEN", 1.0, 2.0)
    assert open_secret(keys, record) == "hf_value-2"
    database = Path(db_url.removeprefix("sqlite:///"))
    written = [path.read_bytes() for path in database.parent.glob(f"{database.name}*")]  # -wal too
    assert written and all(b"hf_value" not in data and b"elsewhere" not in data for data in written)
    moved = SecretRecord.model_validate(record.model_dump() | {"name": "OTHER", "id": "main/OTHER"})
    with pytest.raises(SealError, match="does not open"):
        open_secret(keys, moved)
    assert store.list_secrets("main", ["NOPE"]) == []
    assert store.delete_secret("main", "HF_TOKEN") and not store.delete_secret("main", "HF_TOKEN")
    assert store.get_secret("main", "HF_TOKEN") is None
    assert store.get_secret("other", "HF_TOKEN") is not None
