"""The crack-code check of crackle streams (csrc/crackle_check.h)."""

def check_crack_codes(
    data: bytes | memoryview,
    codes_at: int,
    index_at: int,
    crcs_at: int,
    sx: int,
    sy: int,
    sz: int,
    permissible: bool,
    context: str = "",
) -> None: ...
