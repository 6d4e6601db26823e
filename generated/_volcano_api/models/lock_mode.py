from enum import StrEnum


class LockMode(StrEnum):
    EXCLUSIVE = "exclusive"
    SHARED = "shared"

    def __str__(self) -> str:
        return str(self.value)
