// The one exception type ordo throws. Its message is written for the person who made the request.
#pragma once

#include <stdexcept>
#include <string>

namespace ordo {
struct Error : std::runtime_error {
  using std::runtime_error::runtime_error;
};
}  // namespace ordo
