// Forwarding header: access moved to daemon/access/access.h (a leaf, so daemon/pool need not
// include daemon/engine). Only the files of //daemon (daemon_options.h) still include this path;
// delete this file once they include daemon/access/access.h.
#ifndef KVOFFLOAD_DAEMON_ENGINE_ACCESS_H_
#define KVOFFLOAD_DAEMON_ENGINE_ACCESS_H_

#include "daemon/access/access.h"

#endif  // KVOFFLOAD_DAEMON_ENGINE_ACCESS_H_
