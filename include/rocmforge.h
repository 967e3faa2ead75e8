/* rocmforge.h — the public C API of ROCmForge: one include for everything a caller needs.
 * Opaque handles, rf_ prefix, every call returns rf_status with a message in rf_last_error(). */
#ifndef ROCMFORGE_H
#define ROCMFORGE_H

#include "rocmforge/core.h"     /* status codes, errors, logging, tensor types */
#include "rocmforge/gguf.h"     /* GGUF reader and writer */
#include "rocmforge/quant.h"    /* block formats: type table, (de)quantize rows */
#include "rocmforge/tokenizer.h" /* vocabulary, tokenize/detokenize, chat templates */
#include "rocmforge/engine.h"   /* models, sessions, generation */
#include "rocmforge/mkmodel.h"  /* synthetic GGUF models (rocmforge mkmodel) */

#endif
