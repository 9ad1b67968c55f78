// Forwarding header: DeferredRelease moved to daemon/lifetime/deferred_release.h (a leaf, so
// daemon/pool need not include daemon/engine). Only daemon/daemon.cc still includes this path;
// delete this file once it includes daemon/lifetime/deferred_release.h.
#ifndef KVOFFLOAD_DAEMON_ENGINE_DEFERRED_RELEASE_H_
#define KVOFFLOAD_DAEMON_ENGINE_DEFERRED_RELEASE_H_

#include "daemon/lifetime/deferred_release.h"

#endif  // KVOFFLOAD_DAEMON_ENGINE_DEFERRED_RELEASE_H_
