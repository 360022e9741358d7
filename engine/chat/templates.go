package chat

import "strings"

type recognizer struct {
	name   string
	match  func([]segment) bool
	render func(*builder, []Message, RenderOpts)
}

var recognizers = []recognizer{
	{"chatml", matchChatML, renderChatML},
	{"qwen3", matchQwen3, renderQwen3},
}

// canon joins segments after merging adjacent expressions ({{ a }}{{ b }} prints what
// {{ a + b }} prints for the strings these templates print), so that one template writing
// a turn in one expression and another writing it in three look the same.
func canon(segs []segment) string {
	var merged []segment
	for _, s := range segs {
		if n := len(merged); n > 0 && s.tag == '{' && merged[n-1].tag == '{' {
			merged[n-1].body = normalize(merged[n-1].body + "+" + s.body)
			continue
		}
		merged = append(merged, s)
	}
	return join(merged)
}

func hasText(segs []segment) bool {
	for _, s := range segs {
		if s.tag == 0 {
			return true
		}
	}
	return false
}

// The minimal ChatML template: every message as <|im_start|>role\ncontent<|im_end|>\n, then
// the assistant's opening. Nothing else may be in the template.
var chatMLShape = canonShape(`{% for message in messages %}` +
	`{{ '<|im_start|>' + message['role'] + '\n' + message['content'] + '<|im_end|>' + '\n' }}` +
	`{% endfor %}` +
	`{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}`)

func matchChatML(segs []segment) bool { return !hasText(segs) && canon(segs) == chatMLShape }

func renderChatML(b *builder, msgs []Message, o RenderOpts) {
	for _, m := range msgs {
		b.markup("<|im_start|>" + m.Role + "\n")
		b.content(m.Content)
		b.markup("<|im_end|>\n")
	}
	if o.AddGenerationPrompt {
		b.markup("<|im_start|>assistant\n")
	}
}

// Qwen3's template. Its tools preamble and tool-call formatting only print when tools or
// tool calls are passed, which Message cannot carry; everything that prints for plain
// messages must be exactly this: the optional system turn, the search for the last real user
// query, the turns (assistant turns after that query keep their reasoning in a <think>
// block, earlier ones lose it), tool results folded into user turns, and the generation
// prompt with the empty think block when thinking is off.
var (
	qwen3Start = canonShape(`{%- if tools %}`)
	qwen3Body  = canonShape(`{%- else %}
    {%- if messages[0].role == 'system' %}
        {{- '<|im_start|>system\n' + messages[0].content + '<|im_end|>\n' }}
    {%- endif %}
{%- endif %}
{%- set ns = namespace(multi_step_tool=true, last_query_index=messages|length - 1) %}
{%- for message in messages[::-1] %}
    {%- set index = (messages|length - 1) - loop.index0 %}
    {%- if ns.multi_step_tool and message.role == "user" and not(message.content.startswith('<tool_response>') and message.content.endswith('</tool_response>')) %}
        {%- set ns.multi_step_tool = false %}
        {%- set ns.last_query_index = index %}
    {%- endif %}
{%- endfor %}
{%- for message in messages %}
    {%- if (message.role == "user") or (message.role == "system" and not loop.first) %}
        {{- '<|im_start|>' + message.role + '\n' + message.content + '<|im_end|>' + '\n' }}
    {%- elif message.role == "assistant" %}
        {%- set content = message.content %}
        {%- set reasoning_content = '' %}
        {%- if message.reasoning_content is defined and message.reasoning_content is not none %}
            {%- set reasoning_content = message.reasoning_content %}
        {%- else %}
            {%- if '</think>' in message.content %}
                {%- set content = message.content.split('</think>')[-1].lstrip('\n') %}
                {%- set reasoning_content = message.content.split('</think>')[0].rstrip('\n').split('<think>')[-1].lstrip('\n') %}
            {%- endif %}
        {%- endif %}
        {%- if loop.index0 > ns.last_query_index %}
            {%- if loop.last or (not loop.last and reasoning_content) %}
                {{- '<|im_start|>' + message.role + '\n<think>\n' + reasoning_content.strip('\n') + '\n</think>\n\n' + content.lstrip('\n') }}
            {%- else %}
                {{- '<|im_start|>' + message.role + '\n' + content }}
            {%- endif %}
        {%- else %}
            {{- '<|im_start|>' + message.role + '\n' + content }}
        {%- endif %}
        {%- if message.tool_calls %}`)
	qwen3End = canonShape(`{{- '<|im_end|>\n' }}
    {%- elif message.role == "tool" %}
        {%- if loop.first or (messages[loop.index0 - 1].role != "tool") %}
            {{- '<|im_start|>user' }}
        {%- endif %}
        {{- '\n<tool_response>\n' }}
        {{- message.content }}
        {{- '\n</tool_response>' }}
        {%- if loop.last or (messages[loop.index0 + 1].role != "tool") %}
            {{- '<|im_end|>\n' }}
        {%- endif %}
    {%- endif %}
{%- endfor %}
{%- if add_generation_prompt %}
    {{- '<|im_start|>assistant\n' }}
    {%- if enable_thinking is defined and enable_thinking is false %}
        {{- '<think>\n\n</think>\n\n' }}
    {%- endif %}
{%- endif %}`)
)

func matchQwen3(segs []segment) bool {
	if hasText(segs) {
		return false
	}
	c := canon(segs)
	body := strings.Index(c, qwen3Body)
	return strings.HasPrefix(c, qwen3Start) && body >= 0 &&
		strings.HasSuffix(c, qwen3End) && body+len(qwen3Body) <= len(c)-len(qwen3End)
}

func renderQwen3(b *builder, msgs []Message, o RenderOpts) {
	if msgs[0].Role == "system" {
		b.markup("<|im_start|>system\n")
		b.content(msgs[0].Content)
		b.markup("<|im_end|>\n")
	}
	// The last user message that is not a tool result wrapped as one; assistant turns after
	// it belong to the answer in progress and keep their reasoning.
	lastQuery := len(msgs) - 1
	for i := len(msgs) - 1; i >= 0; i-- {
		c := msgs[i].Content
		if msgs[i].Role == "user" && !(strings.HasPrefix(c, "<tool_response>") && strings.HasSuffix(c, "</tool_response>")) {
			lastQuery = i
			break
		}
	}
	last := len(msgs) - 1
	for i, m := range msgs {
		switch m.Role {
		case "user":
			b.markup("<|im_start|>user\n")
			b.content(m.Content)
			b.markup("<|im_end|>\n")
		case "assistant":
			content, reasoning := m.Content, ""
			if strings.Contains(content, "</think>") {
				parts := strings.Split(content, "</think>")
				content = strings.TrimLeft(parts[len(parts)-1], "\n")
				before := strings.Split(strings.TrimRight(parts[0], "\n"), "<think>")
				reasoning = strings.TrimLeft(before[len(before)-1], "\n")
			}
			b.markup("<|im_start|>assistant\n")
			if i > lastQuery && (i == last || reasoning != "") {
				b.markup("<think>\n")
				b.content(strings.Trim(reasoning, "\n"))
				b.markup("\n</think>\n\n")
				b.content(strings.TrimLeft(content, "\n"))
			} else {
				b.content(content)
			}
			b.markup("<|im_end|>\n")
		case "tool":
			if i == 0 || msgs[i-1].Role != "tool" {
				b.markup("<|im_start|>user")
			}
			b.markup("\n<tool_response>\n")
			b.content(m.Content)
			b.markup("\n</tool_response>")
			if i == last || msgs[i+1].Role != "tool" {
				b.markup("<|im_end|>\n")
			}
		}
	}
	if o.AddGenerationPrompt {
		b.markup("<|im_start|>assistant\n")
		if !o.EnableThinking {
			b.markup("<think>\n\n</think>\n\n")
		}
	}
}

func canonShape(src string) string {
	segs, err := lex(src)
	if err != nil {
		panic("chat: bad built-in shape: " + err.Error())
	}
	return canon(segs)
}
