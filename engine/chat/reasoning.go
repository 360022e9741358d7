package chat

import "strings"

// Thinking models (Qwen3, QwQ, DeepSeek-R1 style) write their reasoning between <think> and
// </think> before the answer; some templates open the block in the generation prompt, so
// the output starts inside it.
const (
	thinkOpen  = "<think>"
	thinkClose = "</think>"
)

// OpensThinking reports whether a rendered prompt ends inside an open <think> block (the
// Qwen3 Thinking-2507 templates end their generation prompt with "<think>\n").
func OpensThinking(prompt string) bool {
	return strings.LastIndex(prompt, thinkOpen) > strings.LastIndex(prompt, thinkClose)
}

// SplitReasoning separates a thinking model's reasoning from its answer. open says the
// prompt left a <think> block open (OpensThinking). Reasoning that never closed (the token
// limit came first) is all reasoning and no answer. Text without a think block is all
// answer.
func SplitReasoning(text string, open bool) (answer, reasoning string) {
	body := text
	if !open {
		trimmed := strings.TrimLeft(text, " \t\r\n")
		if !strings.HasPrefix(trimmed, thinkOpen) {
			return text, ""
		}
		body = trimmed[len(thinkOpen):]
	}
	before, after, closed := strings.Cut(body, thinkClose)
	reasoning = strings.Trim(before, "\n")
	if !closed {
		return "", reasoning
	}
	return strings.TrimLeft(after, "\n"), reasoning
}
