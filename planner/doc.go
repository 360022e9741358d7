// Package planner decides how each job runs so that it fits the worker's memory: the context
// it reserves, the prefill chunk, the KV cache precision, whether routed experts are all
// resident or held in a bounded cache, whether MTP runs, and how many slots share the
// device. It is pure: no I/O, no clock, no engine; the same inputs give the same plan.
//
// # The memory model
//
// A job needs, in bytes, rounded up to a MiB at the end:
//
//	need = expert_cache + dense + base
//	     + positions × kv_per_position(precision)
//	     + max(0, chunk − min_chunk) × scratch_per_chunk_token
//	     + (mtp ? mtp_block : 0)
//	positions = context × slots + state_positions(precision) × (slots − 1)
//
// where context = prompt tokens (chat template included) + max_tokens. The terms come from
// three inputs. A Profile describes the model file: the routed-expert payload (each expert's
// slot rounded up to 4 KiB, as a cache holds it), the dense weights, the KV bytes of one
// position (f32 and f16), one sequence's recurrent state (charged for every slot after the
// first as state_positions, its size in KV positions), and the MTP block. A Calibration holds
// what depends on the backend: the base overhead (which includes the first sequence's state
// and the smallest chunk's scratch), the scratch per chunk token above the smallest chunk,
// the buffer alignment (KV and scratch are rounded up to it) and the context beyond which MTP
// stops paying. A Budget is the device limit less a safety margin (0 MiB by default, see
// DefaultMarginMiB). With Red Lite's Metal calibration (RedLiteMetal) and its Qwen3-Next-80B
// IQ2_XXS numbers (testdata/), Estimate reproduces the outcomes Red Lite measured to the MiB.
//
// # The choice
//
// Choose prices every configuration the policy allows — KV f32, f16 or q8_0, MTP on or off, chunks
// 2048, 1024 and 512 — and takes the first that fits in the order of the preference (by
// default f32 before f16 before q8_0, MTP before none, larger chunks before smaller), skipping MTP
// beyond the calibration's MTP context and chunks larger than the prompt needs. All experts
// stay resident if at all possible; a bounded expert cache is the last resort, used (by
// default) only on a worker that cannot hold the experts at all, and then as large as fits,
// but at least one layer of experts. When nothing fits, Choose returns a *DoesNotFitError
// (errors.Is(err, ErrDoesNotFit)) with the need of the cheapest plan, the smallest limit on
// which the job runs and the largest job this worker can take, so that the daemon can archive
// the job with an explanation instead of retrying it.
//
// Profiles are built from plain numbers with ProfileFromFacts; the engine fills Facts from a
// GGUF (tensor bytes by class, hyperparameters). Profiles and calibrations read and write as
// JSON with stable snake_case names, so that plans for models and Macs not at hand can be
// computed and checked.
package planner
