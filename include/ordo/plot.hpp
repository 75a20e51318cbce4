// ULP-distance histograms drawn to a PNG, for `ordo compare --plot FILE.png`. Self-contained: a
// built-in bitmap font and an uncompressed PNG encoder, so nothing beyond fmt is linked.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace ordo {

// One order's distances from the float64 reference, one entry per output element.
struct UlpHistogramPanel {
  std::string title;          // the order name, e.g. "torch1.13-cpu-avx2"
  std::vector<int64_t> ulps;  // >= 0: the ULP distance; -1: NaN where the reference is a number, or the reverse
};

// Writes `path` as an 8-bit RGB PNG: `heading` on top, then one bar chart per panel, stacked.
// Every panel has the same bins (0, 1, 2, 3-4, 5-8, 9-16, ... up to the largest distance in any
// panel, then "nan" if any panel has a -1) and the same log-scale count axis, so bars compare
// across panels. Above each bar is its share of the panel's elements.
// Throws ordo::Error naming `path` on failure (including no panels, or a distance below -1).
// The image is written to a temporary file beside `path` and renamed into place, so a failure
// never leaves a partial file.
void write_ulp_histogram_png(const std::string& path, const std::string& heading,
                             const std::vector<UlpHistogramPanel>& panels);

// One bar of a speed chart: a ratio against a baseline (torch's time over ordo's), and its target.
struct RatioBar {
  std::string label;
  double ratio = 0;        // > 0
  double target = 0;       // 0: none
  bool lower_is_better = false;
};

// Writes `path` as a PNG: `heading`, then one horizontal bar per row on a log axis shared by all
// bars, with a line at 1x (parity), each target as a black tick, the ratio printed after the bar,
// and the bar green where the target is met, red where it is missed, grey without a target.
// Throws ordo::Error naming `path` on failure (no rows, a ratio that is not a positive number);
// written beside `path` and renamed, as write_ulp_histogram_png.
void write_ratio_chart_png(const std::string& path, const std::string& heading, const std::vector<RatioBar>& rows);

}  // namespace ordo
