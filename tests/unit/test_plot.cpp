// The ULP histogram PNG: a well-formed file (signature, chunk CRCs, a zlib stream of stored
// blocks that inflates to the raw scanlines), bars where the data puts them, and atomic writes.
// The PNG is read back by a small independent decoder below, which accepts stored blocks only.
#include <doctest/doctest.h>
#include <fmt/format.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include "ir/error.hpp"
#include "ordo/plot.hpp"

using namespace ordo;
namespace fs = std::filesystem;

namespace {

// The colours plot.cpp fills bars with; it draws no text in them.
constexpr uint8_t kBar[3] = {49, 110, 180}, kNanBar[3] = {200, 55, 45}, kInk[3] = {30, 30, 30};

uint32_t be32(const uint8_t* p) { return uint32_t(p[0]) << 24 | uint32_t(p[1]) << 16 | uint32_t(p[2]) << 8 | p[3]; }

// Bitwise CRC-32 (ISO-HDLC), written independently of plot.cpp's table-driven one.
uint32_t crc32_bitwise(const uint8_t* p, size_t n) {
  uint32_t c = 0xFFFFFFFFu;
  for (size_t i = 0; i < n; ++i) {
    c ^= p[i];
    for (int k = 0; k < 8; ++k) c = (c >> 1) ^ (0xEDB88320u & (0u - (c & 1)));
  }
  return ~c;
}

struct DecodedPng {
  uint32_t width = 0, height = 0;
  std::vector<uint8_t> scanlines;  // inflated IDAT: per row, a filter byte then 3 * width bytes
  const uint8_t* pixel(uint32_t x, uint32_t y) const {
    return &scanlines[size_t(y) * (1 + 3 * size_t(width)) + 1 + 3 * size_t(x)];
  }
};

// A zlib stream whose deflate blocks are all stored (BTYPE 00); checks the header and Adler-32.
std::vector<uint8_t> inflate_stored(const std::vector<uint8_t>& z) {
  REQUIRE(z.size() >= 6);
  CHECK((z[0] & 0x0F) == 8);                  // CM = deflate
  CHECK((z[0] * 256 + z[1]) % 31 == 0);        // FCHECK
  CHECK((z[1] & 0x20) == 0);                   // no preset dictionary
  std::vector<uint8_t> out;
  size_t at = 2;
  for (bool final = false; !final;) {
    REQUIRE(at + 5 <= z.size());
    final = z[at] & 1;
    REQUIRE(((z[at] >> 1) & 3) == 0);  // stored; it ends byte-aligned, so the next header starts a byte
    const uint16_t len = uint16_t(z[at + 1] | z[at + 2] << 8), nlen = uint16_t(z[at + 3] | z[at + 4] << 8);
    REQUIRE(uint16_t(~len) == nlen);
    at += 5;
    REQUIRE(at + len <= z.size());
    out.insert(out.end(), z.begin() + std::ptrdiff_t(at), z.begin() + std::ptrdiff_t(at + len));
    at += len;
  }
  REQUIRE(at + 4 == z.size());
  uint32_t a = 1, b = 0;
  for (uint8_t byte : out) a = (a + byte) % 65521, b = (b + a) % 65521;
  CHECK(be32(&z[at]) == ((b << 16) | a));
  return out;
}

DecodedPng read_png(const fs::path& path) {
  std::ifstream f(path, std::ios::binary);
  const std::vector<uint8_t> png((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
  const uint8_t signature[8] = {0x89, 'P', 'N', 'G', '\r', '\n', 0x1A, '\n'};
  REQUIRE(png.size() > 8);
  REQUIRE(std::memcmp(png.data(), signature, 8) == 0);
  DecodedPng d;
  std::vector<uint8_t> idat;
  std::vector<std::string> types;
  for (size_t at = 8; at < png.size();) {
    REQUIRE(at + 12 <= png.size());
    const uint32_t len = be32(&png[at]);
    REQUIRE(at + 12 + len <= png.size());
    const std::string type(png.begin() + std::ptrdiff_t(at + 4), png.begin() + std::ptrdiff_t(at + 8));
    const uint8_t* data = &png[at + 8];
    CHECK_MESSAGE(be32(data + len) == crc32_bitwise(&png[at + 4], 4 + len), "CRC of chunk " << type);
    if (type == "IHDR") {
      REQUIRE(len == 13);
      d.width = be32(data), d.height = be32(data + 4);
      CHECK(data[8] == 8);  // bit depth
      CHECK(data[9] == 2);  // colour type RGB
      CHECK((data[10] | data[11] | data[12]) == 0);
    }
    if (type == "IDAT") idat.insert(idat.end(), data, data + len);
    types.push_back(type);
    at += 12 + len;
  }
  REQUIRE(types.size() >= 3);
  CHECK(types.front() == "IHDR");
  CHECK(types.back() == "IEND");
  d.scanlines = inflate_stored(idat);
  return d;
}

bool is(const uint8_t* px, const uint8_t (&rgb)[3]) { return std::memcmp(px, rgb, 3) == 0; }

// Runs of columns in row y whose pixels are `rgb`, as [first, last] pairs.
std::vector<std::pair<uint32_t, uint32_t>> runs_in_row(const DecodedPng& d, uint32_t y, const uint8_t (&rgb)[3]) {
  std::vector<std::pair<uint32_t, uint32_t>> runs;
  for (uint32_t x = 0; x < d.width; ++x)
    if (is(d.pixel(x, y), rgb)) {
      if (runs.empty() || runs.back().second + 1 != x) runs.push_back({x, x});
      else runs.back().second = x;
    }
  return runs;
}

struct TempDir {
  fs::path path = fs::temp_directory_path() / ("ordo_test_plot_" + std::to_string(::getpid()));
  TempDir() { fs::create_directories(path); }
  ~TempDir() { fs::remove_all(path); }
};

}  // namespace

TEST_CASE("a two-panel histogram is a valid PNG with each panel's bars at its own bins") {
  TempDir dir;
  const fs::path path = dir.path / "hist.png";
  UlpHistogramPanel a{"close", {}}, b{"spread", {}};
  a.ulps.insert(a.ulps.end(), 900, 0);  // bins 0 and 1 only
  a.ulps.insert(a.ulps.end(), 100, 1);
  b.ulps.insert(b.ulps.end(), 500, 0);  // bins 0, 33-64 and nan
  b.ulps.insert(b.ulps.end(), 450, 40);
  b.ulps.insert(b.ulps.end(), 50, -1);
  write_ulp_histogram_png(path.string(), "layer_norm y", {a, b});

  const DecodedPng d = read_png(path);
  // Width: bins 0..33-64 and nan make 9 slots of 82 px (the widest share label, ">99.9%", at
  // 12 px a character, plus 12), after 64 px of margin and y labels, then a 20 px margin.
  // Height: 93 above the panels, 296 per panel, two caption lines of 22 px, a 20 px margin.
  constexpr uint32_t kSlot = 82;
  CHECK(d.width == 64 + 9 * kSlot + 20);
  CHECK(d.height == 749);
  REQUIRE(d.scanlines.size() == size_t(d.height) * (1 + 3 * size_t(d.width)));
  for (uint32_t y = 0; y < d.height; ++y) CHECK(d.scanlines[size_t(y) * (1 + 3 * size_t(d.width))] == 0);

  // Each panel's bars share a baseline, so rows holding bar pixels form one run per panel, and
  // the run's last row crosses every bar of that panel.
  std::vector<bool> has_bar(d.height + 1, false);
  for (uint32_t y = 0; y < d.height; ++y)
    has_bar[y] = !runs_in_row(d, y, kBar).empty() || !runs_in_row(d, y, kNanBar).empty();
  std::vector<uint32_t> last_rows;
  for (uint32_t y = 0; y < d.height; ++y)
    if (has_bar[y] && !has_bar[y + 1]) last_rows.push_back(y);
  REQUIRE(last_rows.size() == 2);
  const auto blue_a = runs_in_row(d, last_rows[0], kBar), blue_b = runs_in_row(d, last_rows[1], kBar);
  const auto red_a = runs_in_row(d, last_rows[0], kNanBar), red_b = runs_in_row(d, last_rows[1], kNanBar);
  REQUIRE(blue_a.size() == 2);
  REQUIRE(blue_b.size() == 2);
  CHECK(red_a.empty());  // no NaN in the first panel, though the nan bin exists for both
  REQUIRE(red_b.size() == 1);
  CHECK(blue_a[0] == blue_b[0]);                       // bin 0 is in the same place in both panels
  CHECK(blue_b[1].first == blue_a[1].first + 6 * kSlot);  // 33-64 lies 6 slots right of bin 1
  CHECK(red_b[0].first > blue_b[1].second);            // nan is the last bin
  // 900 zeros against 500: the first panel's bin-0 bar is taller (same log scale in both).
  auto bar_height = [&](uint32_t last_row, uint32_t x) {
    uint32_t h = 0;
    while (h <= last_row && is(d.pixel(x, last_row - h), kBar)) ++h;
    return h;
  };
  CHECK(bar_height(last_rows[0], blue_a[0].first) > bar_height(last_rows[1], blue_b[0].first));

  // Nothing but the finished file is left in the directory.
  CHECK(std::distance(fs::directory_iterator(dir.path), fs::directory_iterator()) == 1);
}

TEST_CASE("a long title wraps inside the image, which keeps the width its plots need") {
  TempDir dir;
  UlpHistogramPanel a{"close", {}};
  a.ulps.insert(a.ulps.end(), 100, 0);
  a.ulps.insert(a.ulps.end(), 10, 3);
  const fs::path short_path = dir.path / "short.png", long_path = dir.path / "long.png";
  write_ulp_histogram_png(short_path.string(), "layer_norm y", {a});
  std::string title = "ordo compare layer_norm: ULP distance of y from float64, N=4096 rows=64 bf16, orders";
  for (int i = 0; i < 12; ++i) title += fmt::format(" lane-welford(lanes={},chunk={},fma=all,acc=f64)", 1 << (i % 5), i + 1);
  title += " " + std::string(400, 'x');  // a word wider than the image: broken, not cut
  write_ulp_histogram_png(long_path.string(), title, {a});
  const DecodedPng s = read_png(short_path), d = read_png(long_path);
  CHECK(d.width == s.width);   // the title does not widen the image...
  CHECK(d.height > s.height);  // ...it takes more lines
  // Heading ink: the rows above the first panel title hold dark text, and none of it touches the
  // 20-pixel margins, so no glyph was cut at an edge.
  uint32_t ink_rows = 0;
  for (uint32_t y = 0; y < d.height - s.height + 20; ++y) {
    const auto runs = runs_in_row(d, y, kInk);
    if (runs.empty()) continue;
    ++ink_rows;
    CHECK(runs.front().first >= 20);
    CHECK(runs.back().second < d.width - 20);
  }
  CHECK(ink_rows > 3 * 7 * 2);  // several lines of capitals, 7 pixel rows each at scale 2 or more
}

TEST_CASE("an unwritable path throws an Error naming it and leaves no file") {
  TempDir dir;
  const fs::path path = dir.path / "no-such-dir" / "hist.png";
  try {
    write_ulp_histogram_png(path.string(), "h", {{"fast", {0, 1, 2}}});
    FAIL("expected ordo::Error");
  } catch (const Error& e) {
    CHECK(std::string(e.what()).find(path.string()) != std::string::npos);
  }
  CHECK(!fs::exists(path));
  CHECK(fs::is_empty(dir.path));
}

TEST_CASE("bad input is rejected before anything is written") {
  TempDir dir;
  const fs::path path = dir.path / "hist.png";
  CHECK_THROWS_AS(write_ulp_histogram_png(path.string(), "h", {}), Error);
  CHECK_THROWS_WITH_AS(write_ulp_histogram_png(path.string(), "h", {{"fast", {0, -2}}}),
                       doctest::Contains("-2"), Error);
  CHECK(fs::is_empty(dir.path));
}

TEST_CASE("the speed chart: a bar per row, longer for a larger ratio, green where the target is met, red where missed") {
  TempDir dir;
  const fs::path path = dir.path / "speed.png";
  write_ratio_chart_png(path.string(), "ordo vs torch",
                        {{"met", 4.0, 3.0, false}, {"missed", 2.0, 3.0, false}, {"lower is better, met", 0.5, 0.6, true}});
  const DecodedPng d = read_png(path);
  constexpr uint8_t kMet[3] = {56, 150, 70}, kMissed[3] = {200, 55, 45};
  // Where each colour's bars end (the target ticks cross the bars, so runs are cut; the ends are not).
  auto right_end = [&](const uint8_t (&rgb)[3]) {
    uint32_t end = 0;
    for (uint32_t y = 0; y < d.height; ++y)
      for (auto [a, b] : runs_in_row(d, y, rgb)) end = std::max(end, b);
    return end;
  };
  const uint32_t met = right_end(kMet), missed = right_end(kMissed);
  CHECK(met > 0);
  CHECK(missed > 0);
  CHECK(met > missed);  // 4x reaches further than 2x on the shared axis
  CHECK_THROWS_WITH_AS(write_ratio_chart_png((dir.path / "none.png").string(), "x", {}), doctest::Contains("no rows"), Error);
  CHECK_THROWS_WITH_AS(write_ratio_chart_png((dir.path / "bad.png").string(), "x", {{"zero", 0.0, 1.0, false}}),
                       doctest::Contains("zero"), Error);
  CHECK(!fs::exists(dir.path / "none.png"));
  CHECK(!fs::exists(dir.path / "bad.png"));
}
