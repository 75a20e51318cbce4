// ordo cache: the persistent kernel cache.
#include "tools/cli.hpp"

#include "ordo/disk_cache.hpp"

namespace ordo::cli {

const char* const kCacheHelp = R"(usage: ordo cache stats|clear

  stats                 where it is, how many entries, how large   ordo cache stats
  clear                 remove every entry                         ordo cache clear
The cache is $ORDO_CACHE_DIR, else $XDG_CACHE_HOME/ordo, else ~/.cache/ordo; ORDO_CACHE=0
turns it off and ORDO_CACHE_MAX_MB (default 256) bounds it.
)";

// ordo cache stats|clear: the persistent kernel cache (include/ordo/disk_cache.hpp).
int cmd_cache(int argc, char** argv) {
  Args a = Args::parse(argc, argv, 2, {}, {});
  if (a.positional.size() != 1 || (a.positional[0] != "stats" && a.positional[0] != "clear"))
    throw Error("usage: ordo cache stats|clear");
  const ordo::disk_cache::Settings s = ordo::disk_cache::settings();
  if (a.positional[0] == "clear") {
    const uint64_t n = ordo::disk_cache::clear();
    fmt::print("removed {} entries from {}\n", n, s.dir);
    return 0;
  }
  const ordo::disk_cache::Usage u = ordo::disk_cache::usage();
  fmt::print("directory  {}\nenabled    {}\nentries    {}\nsize       {:.2f} MiB of {:.0f} MiB (least recently used evicted past it)\n",
             s.dir, s.enabled ? "yes" : "no (ORDO_CACHE=0)", u.entries, static_cast<double>(u.bytes) / (1 << 20),
             static_cast<double>(s.max_bytes) / (1 << 20));
  return 0;
}

}  // namespace ordo::cli
