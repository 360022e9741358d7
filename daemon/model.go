package daemon

import (
	"errors"
	"fmt"
	"path/filepath"
	"strings"

	"github.com/redlite/batch/engine"
	"github.com/redlite/batch/engine/chat"
	"github.com/redlite/batch/engine/ml"
	"github.com/redlite/batch/engine/modelinfo"
	"github.com/redlite/batch/engine/tokenizer"
	"github.com/redlite/batch/jobs"
	"github.com/redlite/batch/planner"
)

// loadedModel is the model the daemon serves: loaded once at start and kept, with what every
// job needs from it.
type loadedModel struct {
	m       *engine.Model
	name    string
	path    string
	tok     *tokenizer.Tokenizer
	tmpl    *chat.Template // nil when the file has no template this worker can render
	tmplErr error
	profile planner.Profile
}

// loadModel loads path on the backend of eo (the CPU backend with eo.Threads threads when
// unset).
func loadModel(path, name string, eo engine.Options, template ...string) (*loadedModel, error) {
	m, err := engine.Load(path, eo)
	if err != nil {
		return nil, fmt.Errorf("load model (REDLITE_MODEL=%s): %w", path, err)
	}
	lm := &loadedModel{m: m, path: path, name: name}
	if lm.tok, err = m.Tokenizer(); err != nil {
		m.Close()
		return nil, fmt.Errorf("load model %s: tokenizer: %w", path, err)
	}
	if len(template) > 0 && template[0] != "" {
		if lm.tmpl, lm.tmplErr = chat.Builtin(template[0]); lm.tmpl != nil {
			lm.tmpl.BOSToken, lm.tmpl.EOSToken = lm.tok.Token(lm.tok.BOS()), lm.tok.Token(lm.tok.EOS())
		}
	} else {
		lm.tmpl, lm.tmplErr = chat.FromGGUF(m.File)
	}
	if lm.tmpl != nil {
		// A template that cannot render a plain conversation serves no chat job: say so at
		// start rather than with every job.
		probe := chat.Conversation{Messages: chat.Messages(chat.Message{Role: "system", Content: "probe"}, chat.Message{Role: "user", Content: "probe"}), AddGenerationPrompt: true}
		if _, err := lm.tmpl.Encode(probe, lm.tok); err != nil {
			lm.tmpl, lm.tmplErr = nil, fmt.Errorf("it does not render a system and a user message: %w", err)
		}
	}
	if lm.profile, err = ProfileOf(m); err != nil {
		m.Close()
		return nil, fmt.Errorf("load model %s: %w", path, err)
	}
	if lm.name == "" {
		lm.name = modelName(m, path)
	}
	return lm, nil
}

func (lm *loadedModel) close() error { return lm.m.Close() }

// expertStats reads the backend's expert cache counters (zero without a cache).
func (lm *loadedModel) expertStats() ml.ExpertStats {
	if er, ok := lm.m.Backend.(ml.ExpertResidency); ok {
		return er.ExpertStats()
	}
	return ml.ExpertStats{}
}

// setExpertCache sizes the backend's routed-expert cache as a plan or a pool says: unbounded
// for full residency, cacheBytes for a bounded cache. Outputs do not depend on it; only which
// expert bytes stay in memory does. Any backend that implements ml.ExpertResidency can hold a
// bounded cache.
func (lm *loadedModel) setExpertCache(res planner.Residency, cacheBytes int64) error {
	er, ok := lm.m.Backend.(ml.ExpertResidency)
	if !ok {
		if res == planner.ResidencyCache {
			return fmt.Errorf("the plan wants a bounded expert cache but backend %s has none", lm.m.Backend.Name())
		}
		return nil
	}
	var bytes int64
	if res == planner.ResidencyCache {
		bytes = max(cacheBytes, 1)
	}
	if er.ExpertStats().Capacity == bytes {
		return nil
	}
	return er.SetExpertCache(bytes)
}

// modelName is general.name when the file has one, else the file name without .gguf.
func modelName(m *engine.Model, path string) string {
	if n, err := m.File.String("general.name"); err == nil && strings.TrimSpace(n) != "" {
		return strings.TrimSpace(n)
	}
	return strings.TrimSuffix(filepath.Base(path), ".gguf")
}

// serves reports whether a payload's "model" names this model (jobs.Capability.Serves).
func (lm *loadedModel) serves(want string) bool {
	return jobs.Capability{Model: lm.name, ModelFile: filepath.Base(lm.path)}.Serves(want)
}

// engineFacts is the engine's model.Facts method set, declared here so that the daemon uses
// it wherever an architecture implements it without depending on its declaration.
type engineFacts interface {
	RecurrentBytes() int64
}

// ProfileOf derives the planner's model profile from the GGUF: tensor bytes by class from
// the tensor list, KV bytes from the hyperparameters, the recurrent state from the
// architecture when it reports it.
func ProfileOf(m *engine.Model) (planner.Profile, error) {
	cfg := m.Config()
	f := m.File
	arch := cfg.Arch
	facts := planner.Facts{
		Architecture:    arch,
		Name:            modelName(m, f.Path),
		Source:          f.Path,
		ContextLength:   cfg.ContextLength,
		AttentionLayers: cfg.AttnLayers,
		KVHeads:         cfg.KVHeads,
		KeyLength:       cfg.HeadDim,
		ValueLength:     cfg.HeadDim,
	}
	if n, err := f.IntOr(arch+".expert_count", 0); err == nil {
		facts.ExpertCount = int(n)
	}
	if n, err := f.IntOr(arch+".expert_used_count", 0); err == nil {
		facts.ExpertUsedCount = int(n)
	}
	if ef, ok := m.Graph.(engineFacts); ok {
		facts.RecurrentStateBytes = ef.RecurrentBytes()
	}
	mtpFirst := modelinfo.MTPFirstBlock(f, arch)
	for _, t := range f.Tensors {
		layer, class := modelinfo.TensorRole(t.Name, mtpFirst)
		facts.Tensors = append(facts.Tensors, planner.TensorFact{Name: t.Name, Layer: layer, Class: class, Bytes: int64(t.Size)})
	}
	p, err := planner.ProfileFromFacts(facts)
	if err != nil {
		return planner.Profile{}, fmt.Errorf("model profile: %w", err)
	}
	return p, nil
}

// errNoTemplate is returned for chat jobs when the model has no chat template this worker
// can render.
var errNoTemplate = errors.New("the model has no chat template this worker can render")

// prompt is a job's prompt: token ids, and whether the prompt leaves a <think> block open
// (the answer then starts with reasoning).
type prompt struct {
	ids      []int32
	thinking bool
}

// tokenize turns a payload into its prompt.
func (lm *loadedModel) tokenize(p jobs.Payload) (prompt, error) {
	switch p := p.(type) {
	case *jobs.Generate:
		if p.Prompt != "" {
			// A raw prompt is the client's text: control-token text in it stays text.
			return prompt{ids: lm.tok.EncodeWith(p.Prompt, tokenizer.EncodeOpts{AddSpecial: true})}, nil
		}
		return lm.encodeChat(p.Messages, p.EnableThinking != nil && *p.EnableThinking)
	case *jobs.Summarize:
		// A summary wants the answer, not the reasoning.
		return lm.encodeChat(jobs.SummarizeMessages(p), false)
	}
	return prompt{}, fmt.Errorf("tokenize: unknown payload type %T", p)
}

// encodeChat renders msgs with the model's chat template and tokenizes the result so that
// control tokens come only from the template's own text: a document containing
// "<|im_end|>" cannot end its own turn and speak as the system (chat.Template.Encode).
func (lm *loadedModel) encodeChat(msgs []jobs.Message, thinking bool) (prompt, error) {
	if lm.tmpl == nil {
		return prompt{}, fmt.Errorf("%w: %v; use \"prompt\" instead of \"messages\", or set REDLITE_CHAT_TEMPLATE", errNoTemplate, lm.tmplErr)
	}
	p, err := lm.tmpl.Encode(chat.Conversation{
		Messages:            chat.Messages(toChat(msgs)...),
		AddGenerationPrompt: true,
		EnableThinking:      &thinking,
	}, lm.tok)
	if err != nil {
		return prompt{}, fmt.Errorf("render chat template: %w", err)
	}
	return prompt{ids: p.IDs, thinking: chat.OpensThinking(p.Text)}, nil
}

// toChat turns a payload's messages into the chat package's.
func toChat(msgs []jobs.Message) []chat.Message {
	out := make([]chat.Message, len(msgs))
	for i, m := range msgs {
		out[i] = chat.Message{Role: m.Role, Content: m.Content}
	}
	return out
}
