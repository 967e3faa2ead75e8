/* rocmforge/engine.h — models, sessions and generation (owned by the CPU-engine work). */
#ifndef ROCMFORGE_ENGINE_H
#define ROCMFORGE_ENGINE_H

#include "rocmforge/core.h"
#include "rocmforge/tokenizer.h"

#endif
