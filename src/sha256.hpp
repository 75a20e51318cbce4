// SHA-256 (FIPS 180-4), for cache keys and entry integrity. Returns the 32-byte digest.
#pragma once

#include <string>
#include <string_view>

namespace ordo {
std::string sha256(std::string_view data);
}
