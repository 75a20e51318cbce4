// Every public header, compiled with include/ as the only include directory (tests/CMakeLists.txt):
// the build fails if one of them reaches into ir/, gen/, backends/ or src/.
#include "ordo/compare.hpp"
#include "ordo/disk_cache.hpp"
#include "ordo/npy.hpp"
#include "ordo/ordo.h"
#include "ordo/ordo.hpp"
#include "ordo/peak.hpp"
#include "ordo/plot.hpp"
#include "ordo/request.hpp"
#include "ordo/scalar_type.hpp"
