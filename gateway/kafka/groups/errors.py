"""The typed error the group coordinator raises: one of Kafka's error codes
(``tmsgate.protocol.ErrorCode``, the gateway's one table of them; a test checks each
against kafka-python's ``kafka.errors``) and a message."""

from __future__ import annotations

from tmsgate.protocol import ErrorCode


class GroupError(Exception):
    """A group request that Kafka answers with an error code instead of doing it."""

    def __init__(self, code: ErrorCode, message: str) -> None:
        super().__init__(message)
        self.code = code

    def __repr__(self) -> str:
        return f"GroupError({self.code.name}, {str(self)!r})"
