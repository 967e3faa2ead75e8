/* synth_templates.c — the chat templates mkmodel's synthetic vocabularies carry
 * (tokenizer.chat_template), one per family: data only, used by synth_vocab.c. */
#include "synth_vocab.h"

const char synth_template_llama3[] =
    "{{- bos_token }}\n"
    "{%- for message in messages %}\n"
    "{{- '<|start_header_id|>' + message['role'] + '<|end_header_id|>\\n\\n' + message['content'] | trim + '<|eot_id|>' }}\n"
    "{%- endfor %}\n"
    "{%- if add_generation_prompt %}\n"
    "{{- '<|start_header_id|>assistant<|end_header_id|>\\n\\n' }}\n"
    "{%- endif %}\n";

const char synth_template_qwen2[] =
    "{%- if messages[0]['role'] != 'system' %}\n"
    "{{- '<|im_start|>system\\nYou are a helpful assistant.<|im_end|>\\n' }}\n"
    "{%- endif %}\n"
    "{%- for message in messages %}\n"
    "{{- '<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>\\n' }}\n"
    "{%- endfor %}\n"
    "{%- if add_generation_prompt %}\n"
    "{{- '<|im_start|>assistant\\n' }}\n"
    "{%- endif %}\n";

const char synth_template_smollm[] =
    "{%- for message in messages %}\n"
    "{%- if loop.first and messages[0]['role'] != 'system' %}\n"
    "{{- '<|im_start|>system\\nYou are a helpful AI assistant.<|im_end|>\\n' }}\n"
    "{%- endif %}\n"
    "{{- '<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>\\n' }}\n"
    "{%- endfor %}\n"
    "{%- if add_generation_prompt %}\n"
    "{{- '<|im_start|>assistant\\n' }}\n"
    "{%- endif %}\n";

const char synth_template_llama2[] =
    "{%- if messages[0]['role'] == 'system' %}\n"
    "{%- set system = '<<SYS>>\\n' + messages[0]['content'] + '\\n<</SYS>>\\n\\n' %}\n"
    "{%- set loop_messages = messages[1:] %}\n"
    "{%- else %}\n"
    "{%- set system = '' %}\n"
    "{%- set loop_messages = messages %}\n"
    "{%- endif %}\n"
    "{%- for message in loop_messages %}\n"
    "{%- if message['role'] == 'user' %}\n"
    "{{- bos_token + '[INST] ' + (system if loop.first else '') + message['content'] | trim + ' [/INST]' }}\n"
    "{%- else %}\n"
    "{{- ' ' + message['content'] | trim + ' ' + eos_token }}\n"
    "{%- endif %}\n"
    "{%- endfor %}\n";

/* A Gemma-4-style template (the official one's turn markers, role 'assistant' -> 'model'; not
 * its tool or thinking parts). */
const char synth_template_gemma4[] =
    "{{- bos_token }}\n"
    "{%- for message in messages %}\n"
    "{%- set role = 'model' if message['role'] == 'assistant' else message['role'] %}\n"
    "{{- '<|turn>' + role + '\\n' + message['content'] | trim + '<turn|>\\n' }}\n"
    "{%- endfor %}\n"
    "{%- if add_generation_prompt %}\n"
    "{{- '<|turn>model\\n' }}\n"
    "{%- endif %}\n";
