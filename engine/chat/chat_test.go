package chat

import (
	"errors"
	"strings"
	"testing"

	"github.com/redlite/batch/engine/gguf"
	"github.com/redlite/batch/internal/fixtures"
)

func fromFixture(t *testing.T, rel ...string) *Template {
	t.Helper()
	f, err := gguf.Open(fixtures.Path(t, rel...))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	tmpl, err := FromGGUF(f)
	if err != nil {
		t.Fatal(err)
	}
	return tmpl
}

func TestRecognizeFixtures(t *testing.T) {
	for _, c := range []struct {
		path []string
		want string
	}{
		{[]string{"vocab", "tiny-bpe512-vocab.gguf"}, "chatml"},
		{[]string{"models", "tiny-qwen3-F32.gguf"}, "chatml"},
		{[]string{"tokenizer", "qwen3-vocab.gguf"}, "qwen3"},
	} {
		if got := fromFixture(t, c.path...).Name(); got != c.want {
			t.Errorf("%s: %q, want %q", strings.Join(c.path, "/"), got, c.want)
		}
	}
}

// The fixture's minimal ChatML template prints each message as
// '<|im_start|>' + role + '\n' + content + '<|im_end|>' + '\n', then, with
// add_generation_prompt, '<|im_start|>assistant\n'. System messages get no special treatment.
func TestRenderChatML(t *testing.T) {
	tmpl := fromFixture(t, "vocab", "tiny-bpe512-vocab.gguf")
	msgs := []Message{
		{"system", "Be brief."},
		{"user", "Summarize:\nline one"},
		{"assistant", "One line."},
		{"user", "Again"},
	}
	const turns = "<|im_start|>system\nBe brief.<|im_end|>\n" +
		"<|im_start|>user\nSummarize:\nline one<|im_end|>\n" +
		"<|im_start|>assistant\nOne line.<|im_end|>\n" +
		"<|im_start|>user\nAgain<|im_end|>\n"
	for _, c := range []struct {
		name string
		opts RenderOpts
		want string
	}{
		{"NoPrompt", RenderOpts{}, turns},
		{"Prompt", RenderOpts{AddGenerationPrompt: true}, turns + "<|im_start|>assistant\n"},
		// The template knows nothing of thinking: the flag changes nothing.
		{"PromptThinking", RenderOpts{AddGenerationPrompt: true, EnableThinking: true}, turns + "<|im_start|>assistant\n"},
	} {
		t.Run(c.name, func(t *testing.T) {
			got, err := tmpl.Render(msgs, c.opts)
			if err != nil {
				t.Fatal(err)
			}
			if got != c.want {
				t.Errorf("got  %q\nwant %q", got, c.want)
			}
		})
	}
}

// Expected strings worked out from Qwen3's template (the one in qwen3-vocab.gguf):
//   - a leading system message prints as a system turn;
//   - ns.last_query_index is the last user message not wrapped in <tool_response>;
//   - an assistant message's reasoning is the text before '</think>' (after '<think>'), its
//     content the text after, both with newlines stripped at the joins; after the last query
//     it prints as '\n<think>\n' + reasoning + '\n</think>\n\n' + content when it is the last
//     message or has reasoning, else (and always before the last query) content alone;
//   - consecutive tool messages share one user turn of <tool_response> blocks;
//   - the generation prompt is '<|im_start|>assistant\n', plus '<think>\n\n</think>\n\n'
//     when enable_thinking is false.
func TestRenderQwen3(t *testing.T) {
	tmpl := fromFixture(t, "tokenizer", "qwen3-vocab.gguf")
	cases := []struct {
		name string
		msgs []Message
		opts RenderOpts
		want string
	}{
		{
			name: "ThinkingOff",
			msgs: []Message{{"system", "You summarize."}, {"user", "Text"}},
			opts: RenderOpts{AddGenerationPrompt: true},
			want: "<|im_start|>system\nYou summarize.<|im_end|>\n<|im_start|>user\nText<|im_end|>\n" +
				"<|im_start|>assistant\n<think>\n\n</think>\n\n",
		},
		{
			name: "ThinkingOn",
			msgs: []Message{{"user", "Text"}},
			opts: RenderOpts{AddGenerationPrompt: true, EnableThinking: true},
			want: "<|im_start|>user\nText<|im_end|>\n<|im_start|>assistant\n",
		},
		{
			name: "NoGenerationPrompt",
			msgs: []Message{{"user", "Text"}},
			want: "<|im_start|>user\nText<|im_end|>\n",
		},
		{
			name: "HistoryLosesReasoning",
			msgs: []Message{
				{"user", "Q1"},
				{"assistant", "<think>\nfirst thoughts\n</think>\n\nA1"},
				{"user", "Q2"},
			},
			opts: RenderOpts{AddGenerationPrompt: true, EnableThinking: true},
			want: "<|im_start|>user\nQ1<|im_end|>\n<|im_start|>assistant\nA1<|im_end|>\n" +
				"<|im_start|>user\nQ2<|im_end|>\n<|im_start|>assistant\n",
		},
		{
			name: "AnswerInProgressKeepsReasoning",
			msgs: []Message{
				{"user", "Q"},
				{"assistant", "<think>\n\nstep one\n\n</think>\n\n\nPartial"},
			},
			want: "<|im_start|>user\nQ<|im_end|>\n" +
				"<|im_start|>assistant\n<think>\nstep one\n</think>\n\nPartial<|im_end|>\n",
		},
		{
			name: "LastAssistantWithoutReasoning",
			msgs: []Message{{"user", "Q"}, {"assistant", "\nA"}},
			want: "<|im_start|>user\nQ<|im_end|>\n<|im_start|>assistant\n<think>\n\n</think>\n\nA<|im_end|>\n",
		},
		{
			name: "ToolResults",
			msgs: []Message{
				{"user", "Weather?"},
				{"assistant", "Checking."},
				{"tool", "sunny"},
				{"tool", "20C"},
				{"assistant", "<think>ok</think>Sunny, 20C."},
			},
			want: "<|im_start|>user\nWeather?<|im_end|>\n" +
				"<|im_start|>assistant\nChecking.<|im_end|>\n" + // reasoning-less, not last: plain
				"<|im_start|>user\n<tool_response>\nsunny\n</tool_response>\n<tool_response>\n20C\n</tool_response><|im_end|>\n" +
				"<|im_start|>assistant\n<think>\nok\n</think>\n\nSunny, 20C.<|im_end|>\n",
		},
		{
			name: "WrappedToolResponseIsNotAQuery",
			msgs: []Message{
				{"user", "Q"},
				{"assistant", "<think>r1</think>call"},
				{"user", "<tool_response>\nx\n</tool_response>"},
				{"assistant", "<think>r2</think>done"},
			},
			want: "<|im_start|>user\nQ<|im_end|>\n" +
				"<|im_start|>assistant\n<think>\nr1\n</think>\n\ncall<|im_end|>\n" +
				"<|im_start|>user\n<tool_response>\nx\n</tool_response><|im_end|>\n" +
				"<|im_start|>assistant\n<think>\nr2\n</think>\n\ndone<|im_end|>\n",
		},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			got, err := tmpl.Render(c.msgs, c.opts)
			if err != nil {
				t.Fatal(err)
			}
			if got != c.want {
				t.Errorf("got  %q\nwant %q", got, c.want)
			}
		})
	}
}

func TestRenderValidation(t *testing.T) {
	tmpl := fromFixture(t, "tokenizer", "qwen3-vocab.gguf")
	for _, c := range []struct {
		name string
		msgs []Message
		want string
	}{
		{"Empty", nil, "chat: no messages"},
		{"UnknownRole", []Message{{"user", "a"}, {"bot", "b"}}, `chat: message 1 has unknown role "bot"`},
		{"LateSystem", []Message{{"user", "a"}, {"assistant", "b"}, {"system", "c"}}, "chat: message 2: a system message must come first"},
	} {
		t.Run(c.name, func(t *testing.T) {
			_, err := tmpl.Render(c.msgs, RenderOpts{AddGenerationPrompt: true})
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Errorf("error %v, want %q", err, c.want)
			}
		})
	}
	// Turns need not alternate.
	if _, err := tmpl.Render([]Message{{"user", "a"}, {"user", "b"}, {"assistant", "c"}, {"assistant", "d"}}, RenderOpts{}); err != nil {
		t.Errorf("non-alternating turns: %v", err)
	}
}

// TestRecognizeReformatted: the shape, not the spelling, decides.
func TestRecognizeReformatted(t *testing.T) {
	src := "{%- for message in messages -%}\n" +
		"  {{- \"<|im_start|>\" + message.role + \"\\n\" }}{{ message[\"content\"] }}{{ '<|im_end|>\\n' -}}\n" +
		"{%- endfor %}\n" +
		"{%- if add_generation_prompt %}{{ '<|im_start|>' + 'assistant\\n' }}{% endif -%}\n"
	tmpl, err := New(src)
	if err != nil {
		t.Fatal(err)
	}
	if tmpl.Name() != "chatml" {
		t.Fatalf("name %q", tmpl.Name())
	}
}

func TestUnsupportedTemplates(t *testing.T) {
	cases := []struct {
		name, src, firstLine string
	}{
		{"Empty", " \n", ""},
		{"Llama3", "{% set loop_messages = messages %}{% for message in loop_messages %}" +
			"{{ '<|start_header_id|>' + message['role'] + '<|end_header_id|>\n\n' + message['content'] | trim + '<|eot_id|>' }}{% endfor %}",
			"{% set loop_messages = messages %}"},
		// ChatML with a default system prompt prints something the minimal shape does not.
		{"DefaultSystem", "{% if messages[0]['role'] != 'system' %}{{ '<|im_start|>system\nYou are a helpful assistant.<|im_end|>\n' }}{% endif %}\n" +
			"{% for message in messages %}{{'<|im_start|>' + message['role'] + '\n' + message['content'] + '<|im_end|>' + '\n'}}{% endfor %}" +
			"{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}",
			"{% if messages[0]['role'] != 'system' %}"},
		// Literal text outside tags would be printed.
		{"StrayText", "Conversation:\n{% for message in messages %}{{'<|im_start|>' + message['role'] + '\n' + message['content'] + '<|im_end|>' + '\n'}}{% endfor %}" +
			"{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}", "Conversation:"},
		{"Unclosed", "{% for message in messages %}{{ message.content ", "{% for message in messages %}"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			_, err := New(c.src)
			if !errors.Is(err, ErrUnsupportedTemplate) {
				t.Fatalf("error %v does not wrap ErrUnsupportedTemplate", err)
			}
			if c.firstLine != "" && !strings.Contains(err.Error(), c.firstLine[:min(len(c.firstLine), 60)]) {
				t.Errorf("error %q does not name the first line %q", err, c.firstLine)
			}
		})
	}
	// Changing one thing Qwen3's template prints (the empty think block) makes it unknown.
	qwen3 := fromFixture(t, "tokenizer", "qwen3-vocab.gguf").Text()
	altered := strings.Replace(qwen3, `'<think>\n\n</think>\n\n'`, `'<think>\n</think>\n'`, 1)
	if altered == qwen3 {
		t.Fatal("Qwen3 template has no empty think block")
	}
	if _, err := New(altered); !errors.Is(err, ErrUnsupportedTemplate) {
		t.Errorf("altered Qwen3 template: %v", err)
	}
}

func TestFromGGUFWithoutTemplate(t *testing.T) {
	w := gguf.NewWriter()
	w.Set("general.architecture", "qwen3")
	var buf strings.Builder
	if _, err := w.WriteTo(&buf); err != nil {
		t.Fatal(err)
	}
	f, err := gguf.Parse([]byte(buf.String()))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := FromGGUF(f); err == nil || !strings.Contains(err.Error(), KeyTemplate) {
		t.Errorf("error %v does not name %s", err, KeyTemplate)
	}
}

func FuzzNew(f *testing.F) {
	f.Add("{% for message in messages %}{{'<|im_start|>' + message['role'] + '\n' + message['content'] + '<|im_end|>' + '\n'}}{% endfor %}")
	f.Add("{{- 'x' -}}{# c #}{%+ if a %}\n  text {{ \"q'\\\"\" }}")
	f.Fuzz(func(t *testing.T, src string) {
		tmpl, err := New(src)
		if err != nil {
			if !errors.Is(err, ErrUnsupportedTemplate) {
				t.Fatalf("error %v does not wrap ErrUnsupportedTemplate", err)
			}
			return
		}
		if _, err := tmpl.Render([]Message{{"user", "hi"}}, RenderOpts{AddGenerationPrompt: true}); err != nil {
			t.Fatal(err)
		}
	})
}
