import grpc
import pytest

from agentfleet.auth import (
    TOKEN_PREFIX,
    Principal,
    bearer_token,
    generate_token,
    hash_token,
)
from agentfleet.errors import InvalidArgument, PermissionDenied
from agentfleet.rpc.grpc_server import to_status


def test_tokens_are_random_and_stored_as_sha256() -> None:
    first, second = generate_token(), generate_token()
    assert first != second
    assert first.startswith(TOKEN_PREFIX)
    assert len(hash_token(first)) == 64
    assert hash_token(first) == hash_token(first)
    assert hash_token(first) != hash_token(second)


@pytest.mark.parametrize(
    ("metadata", "expected"),
    [
        ((("authorization", "Bearer abc"),), "abc"),
        ((("authorization", "bearer  abc "),), "abc"),
        ((("authorization", b"Bearer xyz"),), "xyz"),
        ((("authorization", "Basic abc"),), None),
        ((("authorization", "Bearer "),), None),
        ((("x-other", "Bearer abc"),), None),
        ((), None),
        (None, None),
    ],
)
def test_bearer_token_extraction(metadata, expected) -> None:  # type: ignore[no-untyped-def]
    assert bearer_token(metadata) == expected


def test_project_tokens_are_confined_to_their_project() -> None:
    member = Principal(token_id="t", project_id="alpha", role="member")
    member.check_project("alpha")
    with pytest.raises(PermissionDenied, match="beta"):
        member.check_project("beta")


def test_service_tokens_may_act_on_any_project() -> None:
    service = Principal(token_id="s", project_id=None, role="service")
    service.check_project("alpha")
    service.check_project("beta")


def test_invalid_argument_becomes_a_bad_request_detail() -> None:
    from google.rpc import error_details_pb2, status_pb2

    status = to_status(InvalidArgument.for_field("tasks[1].key", "duplicate key 'a'"))
    assert status.code == grpc.StatusCode.INVALID_ARGUMENT
    assert status.details == "tasks[1].key: duplicate key 'a'"
    ((key, raw),) = [m for m in status.trailing_metadata if m[0] == "grpc-status-details-bin"]
    rich = status_pb2.Status.FromString(raw)
    bad_request = error_details_pb2.BadRequest()
    assert rich.details[0].Unpack(bad_request)
    assert bad_request.field_violations[0].field == "tasks[1].key"
    assert key == "grpc-status-details-bin"
