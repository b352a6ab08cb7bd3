"""What the official-client scripts next to this file share: running one check so that an unexpected exception is
recorded for the Rust side instead of ending the script."""

import sys
import traceback


def run(fn, *args):
    """fn(*args), or {"exception": "Type: message"} when it raises (its traceback goes to stderr)."""
    try:
        return fn(*args)
    except Exception as e:  # noqa: BLE001  (reported to the Rust side)
        traceback.print_exc(file=sys.stderr)
        return {"exception": f"{type(e).__name__}: {e}"}
