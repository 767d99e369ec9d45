"""HypicError: what every failed call raises.

A call the server refuses carries gRPC's status name ("NOT_FOUND", ...) and the
server's message, which names the field and the limit (docs/api.md lists them). As in
libhypic-client (client/include/hypic_client.h): a server that cannot be reached is
UNAVAILABLE, a call past its deadline DEADLINE_EXCEEDED, an argument the client
refuses before sending anything INVALID_ARGUMENT and a response that does not add up
INTERNAL, both with a message starting "client: ".
"""

from __future__ import annotations

import grpc


class HypicError(Exception):
    """A call that did not succeed: `code` is gRPC's status name, `message` the reason."""

    def __init__(self, code: str, message: str) -> None:
        super().__init__(f"{code}: {message}")
        self.code = code
        self.message = message

    @classmethod
    def from_rpc(cls, e: grpc.RpcError) -> HypicError:
        """The status of a failed gRPC call (every grpc.RpcError a call raises is a grpc.Call)."""
        code = e.code() if isinstance(e, grpc.Call) else grpc.StatusCode.UNKNOWN
        details = e.details() if isinstance(e, grpc.Call) else str(e)
        return cls(code.name, details or "")


def client_error(message: str, code: str = "INVALID_ARGUMENT") -> HypicError:
    """An error found on the client's side, marked as the C client marks it."""
    return HypicError(code, "client: " + message)
