"""The closing lines every reference test prints: one line per (op, order, dtype), the source of
the table in docs/verification.md, then the count line CI reads."""


def print_summary(table, passed, failed):
    """table maps (op, order, dtype) to [bit-identical cases, cases]. Returns the exit code: 1 when a
    case failed or when none ran."""
    print()
    for (op, order, dtype), (good, total) in sorted(table.items()):
        print(f"  {op:<11} {order:<24} {dtype:<5} bit-identical on {good} of {total} cases")
    if not passed and not failed:
        # A sweep that compared nothing verified nothing: that is a failure, not a pass.
        print("\nFAIL: no case ran, so nothing was compared")
        print("0 passed, 1 failed")
        return 1
    print(f"\n{passed} passed, {failed} failed")
    return 1 if failed else 0
