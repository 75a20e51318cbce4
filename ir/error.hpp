// The exception type ordo throws. Its message is written for the person who made the request.
#pragma once

#include <stdexcept>
#include <string>

namespace ordo {
struct Error : std::runtime_error {
  using std::runtime_error::runtime_error;
};
// A request for a length at launch (Request::cols_at_launch, seq_k_at_launch) that the order
// cannot serve: it builds its kernel for one length. A caller that asks for the kernel for every
// length first catches this one and asks for the length it has.
struct FixedLengthError : Error {
  using Error::Error;
};
}  // namespace ordo
