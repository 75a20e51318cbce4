#include "ordo/plot.hpp"

#include <fmt/format.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <bit>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <string_view>

#include "ir/error.hpp"

namespace ordo {
namespace {

// ---- Font: 5x7 glyphs (capitals and digits 7 rows tall; g j p q y , ; descend 2 rows below),
// ASCII 32..126, plus '<=' in DEL's slot (127). Nine rows per glyph, top first; bit 4 of a row
// is its leftmost pixel.
constexpr int kGlyphW = 5, kGlyphH = 9, kCapH = 7;
constexpr char kLessEqual = '\x7f';
constexpr uint8_t kFont[96][kGlyphH] = {
    {0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00},  // space
    {0x04, 0x04, 0x04, 0x04, 0x04, 0x00, 0x04, 0x00, 0x00},  // !
    {0x0A, 0x0A, 0x0A, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00},  // "
    {0x0A, 0x0A, 0x1F, 0x0A, 0x1F, 0x0A, 0x0A, 0x00, 0x00},  // #
    {0x04, 0x0F, 0x14, 0x0E, 0x05, 0x1E, 0x04, 0x00, 0x00},  // $
    {0x18, 0x19, 0x02, 0x04, 0x08, 0x13, 0x03, 0x00, 0x00},  // %
    {0x0C, 0x12, 0x14, 0x08, 0x15, 0x12, 0x0D, 0x00, 0x00},  // &
    {0x04, 0x04, 0x08, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00},  // '
    {0x02, 0x04, 0x08, 0x08, 0x08, 0x04, 0x02, 0x00, 0x00},  // (
    {0x08, 0x04, 0x02, 0x02, 0x02, 0x04, 0x08, 0x00, 0x00},  // )
    {0x00, 0x04, 0x15, 0x0E, 0x15, 0x04, 0x00, 0x00, 0x00},  // *
    {0x00, 0x04, 0x04, 0x1F, 0x04, 0x04, 0x00, 0x00, 0x00},  // +
    {0x00, 0x00, 0x00, 0x00, 0x00, 0x0C, 0x0C, 0x04, 0x08},  // ,
    {0x00, 0x00, 0x00, 0x1F, 0x00, 0x00, 0x00, 0x00, 0x00},  // -
    {0x00, 0x00, 0x00, 0x00, 0x00, 0x0C, 0x0C, 0x00, 0x00},  // .
    {0x00, 0x01, 0x02, 0x04, 0x08, 0x10, 0x00, 0x00, 0x00},  // /
    {0x0E, 0x11, 0x13, 0x15, 0x19, 0x11, 0x0E, 0x00, 0x00},  // 0
    {0x04, 0x0C, 0x04, 0x04, 0x04, 0x04, 0x0E, 0x00, 0x00},  // 1
    {0x0E, 0x11, 0x01, 0x02, 0x04, 0x08, 0x1F, 0x00, 0x00},  // 2
    {0x1F, 0x02, 0x04, 0x02, 0x01, 0x11, 0x0E, 0x00, 0x00},  // 3
    {0x02, 0x06, 0x0A, 0x12, 0x1F, 0x02, 0x02, 0x00, 0x00},  // 4
    {0x1F, 0x10, 0x1E, 0x01, 0x01, 0x11, 0x0E, 0x00, 0x00},  // 5
    {0x06, 0x08, 0x10, 0x1E, 0x11, 0x11, 0x0E, 0x00, 0x00},  // 6
    {0x1F, 0x01, 0x02, 0x04, 0x08, 0x08, 0x08, 0x00, 0x00},  // 7
    {0x0E, 0x11, 0x11, 0x0E, 0x11, 0x11, 0x0E, 0x00, 0x00},  // 8
    {0x0E, 0x11, 0x11, 0x0F, 0x01, 0x02, 0x0C, 0x00, 0x00},  // 9
    {0x00, 0x00, 0x0C, 0x0C, 0x00, 0x0C, 0x0C, 0x00, 0x00},  // :
    {0x00, 0x00, 0x0C, 0x0C, 0x00, 0x0C, 0x0C, 0x04, 0x08},  // ;
    {0x02, 0x04, 0x08, 0x10, 0x08, 0x04, 0x02, 0x00, 0x00},  // <
    {0x00, 0x00, 0x1F, 0x00, 0x1F, 0x00, 0x00, 0x00, 0x00},  // =
    {0x08, 0x04, 0x02, 0x01, 0x02, 0x04, 0x08, 0x00, 0x00},  // >
    {0x0E, 0x11, 0x01, 0x02, 0x04, 0x00, 0x04, 0x00, 0x00},  // ?
    {0x0E, 0x11, 0x01, 0x0D, 0x15, 0x15, 0x0E, 0x00, 0x00},  // @
    {0x0E, 0x11, 0x11, 0x1F, 0x11, 0x11, 0x11, 0x00, 0x00},  // A
    {0x1E, 0x11, 0x11, 0x1E, 0x11, 0x11, 0x1E, 0x00, 0x00},  // B
    {0x0E, 0x11, 0x10, 0x10, 0x10, 0x11, 0x0E, 0x00, 0x00},  // C
    {0x1C, 0x12, 0x11, 0x11, 0x11, 0x12, 0x1C, 0x00, 0x00},  // D
    {0x1F, 0x10, 0x10, 0x1E, 0x10, 0x10, 0x1F, 0x00, 0x00},  // E
    {0x1F, 0x10, 0x10, 0x1E, 0x10, 0x10, 0x10, 0x00, 0x00},  // F
    {0x0E, 0x11, 0x10, 0x17, 0x11, 0x11, 0x0F, 0x00, 0x00},  // G
    {0x11, 0x11, 0x11, 0x1F, 0x11, 0x11, 0x11, 0x00, 0x00},  // H
    {0x0E, 0x04, 0x04, 0x04, 0x04, 0x04, 0x0E, 0x00, 0x00},  // I
    {0x07, 0x02, 0x02, 0x02, 0x02, 0x12, 0x0C, 0x00, 0x00},  // J
    {0x11, 0x12, 0x14, 0x18, 0x14, 0x12, 0x11, 0x00, 0x00},  // K
    {0x10, 0x10, 0x10, 0x10, 0x10, 0x10, 0x1F, 0x00, 0x00},  // L
    {0x11, 0x1B, 0x15, 0x15, 0x11, 0x11, 0x11, 0x00, 0x00},  // M
    {0x11, 0x11, 0x19, 0x15, 0x13, 0x11, 0x11, 0x00, 0x00},  // N
    {0x0E, 0x11, 0x11, 0x11, 0x11, 0x11, 0x0E, 0x00, 0x00},  // O
    {0x1E, 0x11, 0x11, 0x1E, 0x10, 0x10, 0x10, 0x00, 0x00},  // P
    {0x0E, 0x11, 0x11, 0x11, 0x15, 0x12, 0x0D, 0x00, 0x00},  // Q
    {0x1E, 0x11, 0x11, 0x1E, 0x14, 0x12, 0x11, 0x00, 0x00},  // R
    {0x0F, 0x10, 0x10, 0x0E, 0x01, 0x01, 0x1E, 0x00, 0x00},  // S
    {0x1F, 0x04, 0x04, 0x04, 0x04, 0x04, 0x04, 0x00, 0x00},  // T
    {0x11, 0x11, 0x11, 0x11, 0x11, 0x11, 0x0E, 0x00, 0x00},  // U
    {0x11, 0x11, 0x11, 0x11, 0x11, 0x0A, 0x04, 0x00, 0x00},  // V
    {0x11, 0x11, 0x11, 0x15, 0x15, 0x15, 0x0A, 0x00, 0x00},  // W
    {0x11, 0x11, 0x0A, 0x04, 0x0A, 0x11, 0x11, 0x00, 0x00},  // X
    {0x11, 0x11, 0x0A, 0x04, 0x04, 0x04, 0x04, 0x00, 0x00},  // Y
    {0x1F, 0x01, 0x02, 0x04, 0x08, 0x10, 0x1F, 0x00, 0x00},  // Z
    {0x0E, 0x08, 0x08, 0x08, 0x08, 0x08, 0x0E, 0x00, 0x00},  // [
    {0x00, 0x10, 0x08, 0x04, 0x02, 0x01, 0x00, 0x00, 0x00},  // backslash
    {0x0E, 0x02, 0x02, 0x02, 0x02, 0x02, 0x0E, 0x00, 0x00},  // ]
    {0x04, 0x0A, 0x11, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00},  // ^
    {0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x1F, 0x00, 0x00},  // _
    {0x08, 0x04, 0x02, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00},  // `
    {0x00, 0x00, 0x0E, 0x01, 0x0F, 0x11, 0x0F, 0x00, 0x00},  // a
    {0x10, 0x10, 0x16, 0x19, 0x11, 0x11, 0x1E, 0x00, 0x00},  // b
    {0x00, 0x00, 0x0E, 0x10, 0x10, 0x11, 0x0E, 0x00, 0x00},  // c
    {0x01, 0x01, 0x0D, 0x13, 0x11, 0x11, 0x0F, 0x00, 0x00},  // d
    {0x00, 0x00, 0x0E, 0x11, 0x1F, 0x10, 0x0E, 0x00, 0x00},  // e
    {0x06, 0x09, 0x08, 0x1C, 0x08, 0x08, 0x08, 0x00, 0x00},  // f
    {0x00, 0x00, 0x0F, 0x11, 0x11, 0x11, 0x0F, 0x01, 0x0E},  // g
    {0x10, 0x10, 0x16, 0x19, 0x11, 0x11, 0x11, 0x00, 0x00},  // h
    {0x04, 0x00, 0x0C, 0x04, 0x04, 0x04, 0x0E, 0x00, 0x00},  // i
    {0x02, 0x00, 0x06, 0x02, 0x02, 0x02, 0x02, 0x12, 0x0C},  // j
    {0x10, 0x10, 0x12, 0x14, 0x18, 0x14, 0x12, 0x00, 0x00},  // k
    {0x0C, 0x04, 0x04, 0x04, 0x04, 0x04, 0x0E, 0x00, 0x00},  // l
    {0x00, 0x00, 0x1A, 0x15, 0x15, 0x11, 0x11, 0x00, 0x00},  // m
    {0x00, 0x00, 0x16, 0x19, 0x11, 0x11, 0x11, 0x00, 0x00},  // n
    {0x00, 0x00, 0x0E, 0x11, 0x11, 0x11, 0x0E, 0x00, 0x00},  // o
    {0x00, 0x00, 0x1E, 0x11, 0x11, 0x11, 0x1E, 0x10, 0x10},  // p
    {0x00, 0x00, 0x0F, 0x11, 0x11, 0x11, 0x0F, 0x01, 0x01},  // q
    {0x00, 0x00, 0x16, 0x19, 0x10, 0x10, 0x10, 0x00, 0x00},  // r
    {0x00, 0x00, 0x0E, 0x10, 0x0E, 0x01, 0x1E, 0x00, 0x00},  // s
    {0x08, 0x08, 0x1C, 0x08, 0x08, 0x09, 0x06, 0x00, 0x00},  // t
    {0x00, 0x00, 0x11, 0x11, 0x11, 0x13, 0x0D, 0x00, 0x00},  // u
    {0x00, 0x00, 0x11, 0x11, 0x11, 0x0A, 0x04, 0x00, 0x00},  // v
    {0x00, 0x00, 0x11, 0x11, 0x15, 0x15, 0x0A, 0x00, 0x00},  // w
    {0x00, 0x00, 0x11, 0x0A, 0x04, 0x0A, 0x11, 0x00, 0x00},  // x
    {0x00, 0x00, 0x11, 0x11, 0x11, 0x11, 0x0F, 0x01, 0x0E},  // y
    {0x00, 0x00, 0x1F, 0x02, 0x04, 0x08, 0x1F, 0x00, 0x00},  // z
    {0x02, 0x04, 0x04, 0x08, 0x04, 0x04, 0x02, 0x00, 0x00},  // {
    {0x04, 0x04, 0x04, 0x04, 0x04, 0x04, 0x04, 0x00, 0x00},  // |
    {0x08, 0x04, 0x04, 0x02, 0x04, 0x04, 0x08, 0x00, 0x00},  // }
    {0x00, 0x00, 0x08, 0x15, 0x02, 0x00, 0x00, 0x00, 0x00},  // ~
    {0x02, 0x04, 0x08, 0x04, 0x02, 0x00, 0x1F, 0x00, 0x00},  // <= (stored in DEL's slot, 0x7f)
};

struct Rgb {
  uint8_t r, g, b;
};
constexpr Rgb kInk{30, 30, 30}, kNote{105, 105, 105}, kGrid{226, 226, 226}, kAxis{70, 70, 70};
constexpr Rgb kBar{49, 110, 180}, kNanBar{200, 55, 45};  // no text is drawn in these: tests find bars by colour

// An 8-bit RGB raster on a white ground; drawing clips at the edges.
class Canvas {
 public:
  Canvas(int width, int height) : width_(width), height_(height), rgb_(size_t(width) * size_t(height) * 3, 255) {}
  int width() const { return width_; }
  int height() const { return height_; }
  const uint8_t* row(int y) const { return rgb_.data() + size_t(y) * size_t(width_) * 3; }

  void fill(int x, int y, int w, int h, Rgb c) {
    for (int yy = std::max(y, 0); yy < std::min(y + h, height_); ++yy)
      for (int xx = std::max(x, 0); xx < std::min(x + w, width_); ++xx) {
        uint8_t* p = rgb_.data() + (size_t(yy) * size_t(width_) + size_t(xx)) * 3;
        p[0] = c.r, p[1] = c.g, p[2] = c.b;
      }
  }

  // `s` with its top-left corner at (x, y), each font pixel a `scale` x `scale` square.
  // Bytes outside the font (such as UTF-8 sequences) draw as '?'.
  void text(int x, int y, std::string_view s, int scale, Rgb c) {
    for (char ch : s) {
      const unsigned code = static_cast<unsigned char>(ch);
      const uint8_t* glyph = kFont[code >= 32 && code <= 127 ? code - 32 : '?' - 32];
      for (int row = 0; row < kGlyphH; ++row)
        for (int col = 0; col < kGlyphW; ++col)
          if (glyph[row] & (0x10 >> col)) fill(x + col * scale, y + row * scale, scale, scale, c);
      x += (kGlyphW + 1) * scale;
    }
  }

 private:
  int width_, height_;
  std::vector<uint8_t> rgb_;
};

int text_width(std::string_view s, int scale) { return s.empty() ? 0 : int(s.size()) * (kGlyphW + 1) * scale - scale; }

// `text` in lines that fit `max_width` pixels at `scale`: broken at spaces, and a word longer
// than a line on its own broken wherever the line is full.
std::vector<std::string> wrap(std::string_view text, int scale, int max_width) {
  const size_t per_line = size_t(std::max(1, (max_width + scale) / ((kGlyphW + 1) * scale)));
  std::vector<std::string> lines;
  std::string line;
  size_t pos = 0;
  while (pos < text.size()) {
    size_t end = text.find(' ', pos);
    if (end == std::string_view::npos) end = text.size();
    std::string_view word = text.substr(pos, end - pos);
    pos = end + 1;
    if (!line.empty() && line.size() + 1 + word.size() <= per_line) {
      line += ' ';
      line += word;
      continue;
    }
    if (!line.empty()) lines.push_back(std::move(line));
    line.clear();
    while (word.size() > per_line) {
      lines.emplace_back(word.substr(0, per_line));
      word.remove_prefix(per_line);
    }
    line = std::string(word);
  }
  if (!line.empty() || lines.empty()) lines.push_back(std::move(line));
  return lines;
}

// ---- PNG: signature, IHDR, one IDAT holding a zlib stream of stored deflate blocks, IEND.

constexpr std::array<uint32_t, 256> kCrcTable = [] {
  std::array<uint32_t, 256> t{};
  for (uint32_t n = 0; n < 256; ++n) {
    uint32_t c = n;
    for (int k = 0; k < 8; ++k) c = (c & 1) ? 0xEDB88320u ^ (c >> 1) : c >> 1;
    t[n] = c;
  }
  return t;
}();

uint32_t crc32(const uint8_t* p, size_t n) {
  uint32_t c = 0xFFFFFFFFu;
  for (size_t i = 0; i < n; ++i) c = kCrcTable[(c ^ p[i]) & 0xFF] ^ (c >> 8);
  return c ^ 0xFFFFFFFFu;
}

void put_u32_be(std::vector<uint8_t>& out, uint32_t v) {
  for (int shift = 24; shift >= 0; shift -= 8) out.push_back(uint8_t(v >> shift));
}

// Length, type, data, then the CRC-32 of type and data.
void put_chunk(std::vector<uint8_t>& png, const char (&type)[5], const std::vector<uint8_t>& data) {
  put_u32_be(png, uint32_t(data.size()));
  const size_t start = png.size();
  png.insert(png.end(), type, type + 4);
  png.insert(png.end(), data.begin(), data.end());
  put_u32_be(png, crc32(png.data() + start, png.size() - start));
}

// A zlib stream (RFC 1950) whose deflate data (RFC 1951) is stored blocks of at most 65535 bytes:
// valid for every PNG reader, and it needs no compressor.
std::vector<uint8_t> zlib_stored(const std::vector<uint8_t>& raw) {
  std::vector<uint8_t> out = {0x78, 0x01};  // deflate, 32K window; 0x7801 is a multiple of 31 as FCHECK requires
  size_t at = 0;
  do {
    const size_t n = std::min<size_t>(65535, raw.size() - at);
    out.push_back(at + n == raw.size() ? 1 : 0);  // BFINAL on the last block; BTYPE 00 = stored
    for (uint16_t v : {uint16_t(n), uint16_t(~n)}) out.push_back(uint8_t(v)), out.push_back(uint8_t(v >> 8));
    out.insert(out.end(), raw.begin() + std::ptrdiff_t(at), raw.begin() + std::ptrdiff_t(at + n));
    at += n;
  } while (at < raw.size());
  uint32_t a = 1, b = 0;  // Adler-32 of the uncompressed bytes
  for (uint8_t byte : raw) a = (a + byte) % 65521, b = (b + a) % 65521;
  put_u32_be(out, (b << 16) | a);
  return out;
}

std::vector<uint8_t> encode_png(const Canvas& c) {
  std::vector<uint8_t> png = {0x89, 'P', 'N', 'G', '\r', '\n', 0x1A, '\n'};
  std::vector<uint8_t> ihdr;
  put_u32_be(ihdr, uint32_t(c.width()));
  put_u32_be(ihdr, uint32_t(c.height()));
  ihdr.insert(ihdr.end(), {8, 2, 0, 0, 0});  // 8-bit, RGB, deflate, adaptive filtering, no interlace
  put_chunk(png, "IHDR", ihdr);
  std::vector<uint8_t> raw;
  raw.reserve(size_t(c.height()) * (1 + size_t(c.width()) * 3));
  for (int y = 0; y < c.height(); ++y) {
    raw.push_back(0);  // filter type None
    raw.insert(raw.end(), c.row(y), c.row(y) + size_t(c.width()) * 3);
  }
  put_chunk(png, "IDAT", zlib_stored(raw));
  put_chunk(png, "IEND", {});
  return png;
}

void write_file_atomic(const std::string& path, const std::vector<uint8_t>& bytes) {
  const std::string tmp = fmt::format("{}.tmp.{}", path, ::getpid());
  errno = 0;
  std::ofstream f(tmp, std::ios::binary | std::ios::trunc);
  if (!f) {
    const std::string reason = errno ? fmt::format(" ({})", std::strerror(errno)) : "";
    throw Error(fmt::format("{}: cannot open for writing{}", path, reason));
  }
  f.write(reinterpret_cast<const char*>(bytes.data()), std::streamsize(bytes.size()));
  f.close();
  if (!f) {
    std::remove(tmp.c_str());
    throw Error(fmt::format("{}: write failed", path));
  }
  if (std::rename(tmp.c_str(), path.c_str()) != 0) {
    std::remove(tmp.c_str());
    throw Error(fmt::format("{}: cannot move the finished file into place", path));
  }
}

// ---- Histogram.

// Bins 0, 1 and 2 hold one distance each; bin b >= 3 holds (2^(b-2), 2^(b-1)].
int bin_of(int64_t ulp) { return ulp <= 2 ? int(ulp) : std::bit_width(uint64_t(ulp - 1)) + 1; }

// Ranges are spelled out while short; above 512 only the upper bound is given ("<=2K" is 1025..2048).
std::string bin_label(int b) {
  if (b <= 2) return std::to_string(b);
  const int exponent = b - 1;
  if (exponent <= 9) return fmt::format("{}-{}", (uint64_t{1} << exponent) / 2 + 1, uint64_t{1} << exponent);
  return fmt::format("{}{}{}", kLessEqual, 1 << (exponent % 10), "KMGTPE"[exponent / 10 - 1]);
}

// A bar's share of its panel, short enough to sit above it. A partial share never reads 0% or 100%.
std::string share_label(int64_t count, int64_t total) {
  if (count == total) return "100%";
  const double p = 100.0 * double(count) / double(total);
  if (p < 0.01) return "<.01%";
  if (p > 99.9) return ">99.9%";
  const int decimals = (p >= 10 && p < 99) ? 0 : p >= 1 ? 1 : 2;
  return fmt::format("{:.{}f}%", p, decimals);
}

std::string decade_label(int d) { return d <= 2 ? std::to_string(int(std::pow(10, d))) : fmt::format("1e{}", d); }

// Layout, in pixels. Text is the font at scale 2 (capitals 14 pixels tall), the heading at scale 3.
constexpr int kScale = 2, kTextH = kGlyphH * kScale, kHeadingScale = 3;
constexpr int kPad = 20, kPlotH = 200, kMinSlot = 64, kMaxBarW = 56, kMinWidth = 720;
constexpr int kPanelH = kTextH + 24 + kPlotH + 10 + kTextH + 26;  // title, share labels, plot, bin labels, gap
const double kHalfDecade = std::log10(2.0);                       // the axis starts at count 1/2, so 1 shows

}  // namespace

void write_ulp_histogram_png(const std::string& path, const std::string& heading,
                             const std::vector<UlpHistogramPanel>& panels) {
  if (panels.empty()) throw Error(fmt::format("{}: no orders to plot", path));

  // Shared bins: numeric bins 0..max_bin, then "nan" when any panel has one.
  int max_bin = 0;
  bool any_nan = false;
  for (const UlpHistogramPanel& p : panels)
    for (int64_t u : p.ulps) {
      if (u < -1)
        throw Error(fmt::format("{}: order '{}' has ULP distance {}; expected >= 0, or -1 for nan", path, p.title, u));
      if (u == -1) any_nan = true;
      else max_bin = std::max(max_bin, bin_of(u));
    }
  const int nbins = max_bin + 1 + (any_nan ? 1 : 0);
  std::vector<std::string> labels;
  for (int b = 0; b <= max_bin; ++b) labels.push_back(bin_label(b));
  if (any_nan) labels.push_back("nan");

  std::vector<std::vector<int64_t>> counts(panels.size(), std::vector<int64_t>(size_t(nbins), 0));
  int64_t max_count = 1;
  for (size_t i = 0; i < panels.size(); ++i) {
    for (int64_t u : panels[i].ulps) ++counts[i][size_t(u == -1 ? nbins - 1 : bin_of(u))];
    for (int64_t c : counts[i]) max_count = std::max(max_count, c);
  }
  int decades = 1;  // the y axis runs from count 1/2 to 10^decades
  for (int64_t top = 10; top < max_count; top *= 10) ++decades;

  // Widths: slots fit the widest bin or share label; the image fits the widest line of text.
  const std::string subtitle = "Shared bins and y scale; above each bar: its share of the panel";
  std::vector<std::string> captions = {"x: distance from the float64 reference in ULPs of the output type"};
  if (any_nan) captions.push_back("nan: NaN on one side only (output or reference)");
  if (max_bin >= 11) {  // explain the "<=" labels and every suffix in use
    std::string units;
    for (int e = 10; e <= max_bin - 1; e += 10)
      units += fmt::format("{}{} = 2^{}", e > 10 ? ", " : "", "KMGTPE"[e / 10 - 1], e);
    captions.push_back(fmt::format("{}2K: 1025-2048 ULPs; {}", kLessEqual, units));
  }
  int slot = kMinSlot;
  for (const std::string& l : labels) slot = std::max(slot, text_width(l, kScale) + 12);
  slot = std::max(slot, text_width(">99.9%", kScale) + 12);
  int tick_w = 0;
  for (int d = 0; d <= decades; ++d) tick_w = std::max(tick_w, text_width(decade_label(d), kScale));
  const int plot_x = kPad + tick_w + 10;
  int width = std::max({kMinWidth, plot_x + nbins * slot + kPad, 2 * kPad + text_width(subtitle, kScale)});
  for (const std::string& c : captions) width = std::max(width, 2 * kPad + text_width(c, kScale));
  auto note_of = [](const UlpHistogramPanel& p) {
    return fmt::format("{} elements; y: count, log scale", p.ulps.size());
  };
  for (const UlpHistogramPanel& p : panels)
    width = std::max(width, plot_x + text_width(p.title, kScale) + 40 + text_width(note_of(p), kScale) + kPad);
  slot = std::max(slot, (width - plot_x - kPad) / nbins);  // spread the bins over any extra width
  const int plot_w = nbins * slot;
  const int bar_w = std::min(kMaxBarW, slot - 12);

  // The heading fits the width the plots need: wrapped, and at the text's scale when it would
  // take more than two lines at the heading's.
  int heading_scale = kHeadingScale;
  std::vector<std::string> heading_lines = wrap(heading, heading_scale, width - 2 * kPad);
  if (heading_lines.size() > 2) {
    heading_scale = kScale;
    heading_lines = wrap(heading, heading_scale, width - 2 * kPad);
  }
  const int heading_line_h = kGlyphH * heading_scale + 6;
  const int subtitle_y = kPad + int(heading_lines.size()) * heading_line_h + 2;
  const int panels_y = subtitle_y + kTextH + 20;
  const int captions_y = panels_y + int(panels.size()) * kPanelH;
  const int height = captions_y + int(captions.size()) * (kTextH + 4) + kPad;
  Canvas canvas(width, height);
  for (size_t i = 0; i < heading_lines.size(); ++i) canvas.text(kPad, kPad + int(i) * heading_line_h, heading_lines[i], heading_scale, kInk);
  canvas.text(kPad, subtitle_y, subtitle, kScale, kNote);

  // Pixels above the baseline for a count, given as its log10, on the axis all panels share.
  auto height_of = [&](double log10_count) {
    return int(std::lround(kPlotH * (log10_count + kHalfDecade) / (decades + kHalfDecade)));
  };
  for (size_t i = 0; i < panels.size(); ++i) {
    const int top = panels_y + int(i) * kPanelH;
    const int base = top + kTextH + 24 + kPlotH;  // the row below the plot area
    canvas.text(plot_x, top, panels[i].title, kScale, kInk);
    const std::string note = note_of(panels[i]);
    canvas.text(plot_x + plot_w - text_width(note, kScale), top, note, kScale, kNote);
    for (int d = 0; d <= decades; ++d) {
      const int y = base - height_of(d);
      canvas.fill(plot_x, y, plot_w, 1, kGrid);
      const std::string tick = decade_label(d);
      canvas.text(plot_x - 10 - text_width(tick, kScale), y - kCapH * kScale / 2, tick, kScale, kNote);
    }
    for (int b = 0; b < nbins; ++b) {
      const int64_t count = counts[i][size_t(b)];
      const int center = plot_x + b * slot + slot / 2;
      if (count > 0) {
        const int h = height_of(std::log10(double(count)));
        canvas.fill(center - bar_w / 2, base - h, bar_w, h, any_nan && b == nbins - 1 ? kNanBar : kBar);
        const std::string share = share_label(count, int64_t(panels[i].ulps.size()));
        canvas.text(center - text_width(share, kScale) / 2, base - h - 6 - kCapH * kScale, share, kScale, kInk);
      }
      const std::string& label = labels[size_t(b)];
      canvas.text(center - text_width(label, kScale) / 2, base + 10, label, kScale, kInk);
    }
    canvas.fill(plot_x, base, plot_w, 2, kAxis);
    canvas.fill(plot_x - 2, base - kPlotH, 2, kPlotH + 2, kAxis);
  }
  for (size_t i = 0; i < captions.size(); ++i)
    canvas.text(kPad, captions_y + int(i) * (kTextH + 4), captions[i], kScale, kNote);

  write_file_atomic(path, encode_png(canvas));
}

void write_ratio_chart_png(const std::string& path, const std::string& heading, const std::vector<RatioBar>& rows) {
  if (rows.empty()) throw Error(fmt::format("{}: no rows to plot", path));
  double lo = 1, hi = 1;  // the axis always shows parity
  for (const RatioBar& r : rows) {
    if (!(r.ratio > 0) || !std::isfinite(r.ratio)) throw Error(fmt::format("{}: row '{}' has ratio {}", path, r.label, r.ratio));
    lo = std::min({lo, r.ratio, r.target > 0 ? r.target : lo});
    hi = std::max({hi, r.ratio, r.target > 0 ? r.target : hi});
  }
  const double log_lo = std::floor(std::log10(lo) * 2) / 2, log_hi = std::ceil(std::log10(hi) * 2) / 2 + 0.25;
  constexpr int kRowH = kTextH + 14, kPlotW = 560;
  int label_w = 0;
  for (const RatioBar& r : rows) label_w = std::max(label_w, text_width(r.label, kScale));
  const int plot_x = kPad + label_w + 16, value_w = text_width("99.99x (>=9.9) ", kScale);
  const int width = std::max(kMinWidth, plot_x + kPlotW + value_w + kPad);
  const std::string caption = "ratio = torch time / ordo time (above 1: ordo is faster); log axis; tick: target; "
                              "green: met, red: missed";
  const std::vector<std::string> heading_lines = wrap(heading, kScale, width - 2 * kPad);
  const std::vector<std::string> caption_lines = wrap(caption, kScale, width - 2 * kPad);
  const int plot_y = kPad + int(heading_lines.size()) * (kTextH + 6) + 10;
  const int axis_y = plot_y + int(rows.size()) * kRowH;
  const int height = axis_y + 2 * kTextH + 20 + int(caption_lines.size()) * (kTextH + 4) + kPad;
  Canvas canvas(width, height);
  for (size_t i = 0; i < heading_lines.size(); ++i) canvas.text(kPad, kPad + int(i) * (kTextH + 6), heading_lines[i], kScale, kInk);
  auto x_of = [&](double v) { return plot_x + int(std::lround(kPlotW * (std::log10(v) - log_lo) / (log_hi - log_lo))); };
  // Grid at each power of ten and its half decade, labelled below the axis.
  for (double e = std::ceil(log_lo * 2) / 2; e <= log_hi; e += 0.5) {
    const double v = std::pow(10.0, e);
    canvas.fill(x_of(v), plot_y, 1, axis_y - plot_y, kGrid);
    const std::string tick = v >= 1 ? fmt::format("{:g}x", std::round(v * 10) / 10) : fmt::format("{:.2g}x", v);
    canvas.text(x_of(v) - text_width(tick, kScale) / 2, axis_y + 8, tick, kScale, kNote);
  }
  constexpr Rgb kMet{56, 150, 70}, kMissed{200, 55, 45}, kNone{150, 150, 150};
  for (size_t i = 0; i < rows.size(); ++i) {
    const RatioBar& r = rows[i];
    const int y = plot_y + int(i) * kRowH;
    canvas.text(plot_x - 16 - text_width(r.label, kScale), y + 4, r.label, kScale, kInk);
    const bool met = r.target <= 0 || (r.lower_is_better ? r.ratio <= r.target : r.ratio >= r.target);
    const int x0 = x_of(std::pow(10.0, log_lo)), x1 = x_of(r.ratio);
    canvas.fill(x0, y + 2, std::max(1, x1 - x0), kRowH - 6, r.target <= 0 ? kNone : met ? kMet : kMissed);
    if (r.target > 0) canvas.fill(x_of(r.target) - 1, y, 3, kRowH - 2, kInk);
    const std::string value = r.target > 0 ? fmt::format("{:.2f}x ({}{:g})", r.ratio, r.lower_is_better ? "<=" : ">=", r.target)
                                           : fmt::format("{:.2f}x", r.ratio);
    canvas.text(std::max(x1, r.target > 0 ? x_of(r.target) : x1) + 8, y + 4, value, kScale, kInk);
  }
  canvas.fill(x_of(1.0) - 1, plot_y, 2, axis_y - plot_y, kAxis);  // parity
  canvas.fill(plot_x, axis_y, kPlotW, 2, kAxis);
  for (size_t i = 0; i < caption_lines.size(); ++i)
    canvas.text(kPad, axis_y + 2 * kTextH + 20 + int(i) * (kTextH + 4), caption_lines[i], kScale, kNote);
  write_file_atomic(path, encode_png(canvas));
}

}  // namespace ordo
