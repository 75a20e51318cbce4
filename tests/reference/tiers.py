"""The three sizes of every reference sweep, chosen on the command line.

  --quick   the inner loop (scripts/test --quick): a case or two per regime.
  (none)    the CI tier, what scripts/test and so CI runs: every regime and every boundary class
            the sweep knows (each tail mod the vector widths, each chunk and split boundary, the
            long rows), with fewer instances of each class than the full sweep.
  --full    every shape and value range the test knows (scripts/test --full): for a change to an
            order, a new torch, or a release.

The CI tier is what fits the fresh-clone budget (docs/testing-time.md); the full tier is the
record behind the counts the issue notes quote.
"""

QUICK, CI, FULL = "quick", "ci", "full"


def add_arguments(parser):
    group = parser.add_mutually_exclusive_group()
    group.add_argument("--quick", action="store_true", help="the inner loop's few cases per regime")
    group.add_argument("--full", action="store_true", help="every shape and value range, not only CI's share")


def chosen(args):
    """The tier the parsed arguments name."""
    return QUICK if args.quick else FULL if args.full else CI


def pick(tier, quick, ci, full):
    """The value for `tier`: pick(tier, N_QUICK, N_CI, N_FULL)."""
    return {QUICK: quick, CI: ci, FULL: full}[tier]
