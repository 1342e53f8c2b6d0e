/*
 * The audio step functions (daemon/steps/audio*.c) as a shared object for
 * the Python fidelity suite (tests/python/test_audio_fidelity.py), which
 * calls them through ctypes with the same inputs it gives torchaudio.
 * audio.h's structs are mirrored there; hook_abi() lets it check the
 * mirror's sizes and offsets against the compiler's.
 */
#include <stddef.h>
#include <stdint.h>

#include "audio.h"

#define HOOK __attribute__((visibility("default")))

/* sizeof and offsetof of what the mirror declares, in a fixed order. */
HOOK size_t hook_abi(int i)
{
    static const size_t v[] = {
        sizeof(struct audio_buf),
        offsetof(struct audio_buf, cap),
        offsetof(struct audio_buf, channels),
        offsetof(struct audio_buf, bins),
        offsetof(struct audio_buf, frames),
        offsetof(struct audio_buf, rate),
        sizeof(struct audio_limits),
        sizeof(struct audio_resample_params),
        sizeof(struct audio_spec_params),
        offsetof(struct audio_spec_params, power),
        offsetof(struct audio_spec_params, center),
        offsetof(struct audio_spec_params, n_mels),
        offsetof(struct audio_spec_params, f_min),
        offsetof(struct audio_spec_params, slaney_norm),
        sizeof(struct audio_db_params),
    };
    return i >= 0 && (size_t)i < sizeof(v) / sizeof(v[0]) ? v[i] : (size_t)-1;
}
