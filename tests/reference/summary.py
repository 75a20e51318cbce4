"""The closing lines every reference test prints: one line per (op, order, dtype), the source of
the README's table, then the count line CI reads."""


def print_summary(table, passed, failed):
    """table maps (op, order, dtype) to [bit-identical cases, cases]. Returns the exit code."""
    print()
    for (op, order, dtype), (good, total) in sorted(table.items()):
        print(f"  {op:<11} {order:<24} {dtype:<5} bit-identical on {good} of {total} cases")
    print(f"\n{passed} passed, {failed} failed")
    return 1 if failed else 0
