"""Build a tiny, random Qwen3-TTS CustomVoice model folder from code alone (no hub, seeded).

    <engine venv>/bin/python scripts/make-tiny-qwen3-tts.py OUT_DIR [--seed 0]

Run with an engine venv's python (scripts/engine-venv.sh, or scripts/engine-venv-sglang.sh):
it needs torch, transformers, tokenizers, safetensors and the 12 Hz codec's decoder class
(vllm-omni 0.30.0's, or qwen-tts 0.1.1's). It writes every file
vllm-omni 0.30.0's two Qwen3-TTS stages read, with shapes small enough for a 2-core CPU:

- config.json: `Qwen3TTSForConditionalGeneration`, `tts_model_type: custom_voice`; a talker of
  hidden 64, 2 layers, 4 heads of head_dim 32 (vLLM's CPU attention has no kernel for head_dim
  16), 2 KV heads, codec vocabulary 3072 with its special ids where the real checkpoint's
  pipeline expects them (codec EOS 2150: vllm-omni's Qwen3-TTS pipeline hard-codes it as the
  stop token), 16 code groups, 9 CustomVoice speakers and 10 languages (ids inside the codec
  vocabulary, above the 2048 codebook entries); a code predictor of 1 layer.
- tokenizer.json + tokenizer_config.json: a byte-level BPE trained here on a generated corpus,
  plus the Qwen chat and TTS special tokens; `assistant` and `\\n` are one token each (the
  prompt builder slices `<|im_start|>assistant\\n` as the first 3 ids).
- speech_tokenizer/: the 12 Hz codec's config (decoder hidden 32, 1 layer, codebook_dim 32,
  16 quantizers, the real upsampling 8*5*4*3 * 2*2 = 1920 samples a frame, so 12.5 frames/s
  give 24 kHz; a tiny Mimi encoder config), preprocessor_config.json, and model.safetensors with
  random `decoder.*` weights and codebooks (the Code2Wav stage loads them through vLLM's real
  loader), its codebooks random and its last layer scaled so the audio is noise near -30 dBFS,
  audible (TheTalker counts a silent stream as a failure), not silence.
- model.safetensors: a one-tensor placeholder. The talker stage is served with
  `load_format: dummy` (random weights, filled by vLLM); the Code2Wav stage's loader drains the
  main folder's weights before it reads speech_tokenizer/, so a file must be there.

Random weights speak noise and may sample the codec EOS early: nothing may assume a length.
"""

from __future__ import annotations

import argparse
import json
import random
import sys
from pathlib import Path

SPEAKERS = ("aiden", "dylan", "eric", "ono_anna", "ryan", "serena", "sohee", "uncle_fu", "vivian")
DIALECTS = {"dylan": "beijing_dialect", "eric": "sichuan_dialect"}
LANGUAGES = (
    "chinese",
    "english",
    "german",
    "italian",
    "portuguese",
    "spanish",
    "japanese",
    "korean",
    "french",
    "russian",
    "beijing_dialect",
    "sichuan_dialect",
)
SPECIAL_TOKENS = (
    "<|endoftext|>",
    "<|im_start|>",
    "<|im_end|>",
    "<|tts_pad|>",
    "<|tts_text_bos|>",
    "<|tts_text_eod|>",
)
NOISE_DBFS = -30.0  # the random codec's output level: audible noise, not silence
# Codec vocabulary layout: 0..2047 codebook entries, then the special ids.
CODEBOOK = 2048
CODEC = {
    "codec_pad_id": 2148,
    "codec_bos_id": 2149,
    "codec_eos_token_id": 2150,  # vllm_omni/model_executor/models/qwen3_tts/pipeline.py stop id
    "codec_think_id": 2154,
    "codec_nothink_id": 2155,
    "codec_think_bos_id": 2156,
    "codec_think_eos_id": 2157,
}
_WORD_TEXT = (
    "the a an and of to in is it that was he she for on are with as his her they at be this "
    "from have or by one had not but what all were when we there can said which do their time "
    "if will way about many then them would write like so these long make thing see him two has "
    "look more day could go come did number sound no most people my over know water than call "
    "first who may down side been now find any new work part take get place made live where "
    "after back little only round man year came show every good me give our under name very "
    "through just form sentence great think say help low line differ turn cause much mean "
    "before move right boy old too same tell does set three want air well also play small end "
    "put home read hand port large spell add even land here must big high such follow act why "
    "ask men change went light kind off need house picture try us again animal point mother "
    "world near build self earth father head stand own page should country found answer school "
    "grow study still learn plant cover food sun four between state keep eye never last let "
    "thought city tree cross farm hard start might story saw far sea draw left late run while "
    "press close night real life few north open seem together next white children begin got "
    "walk example ease paper group always music those both mark often letter until mile river "
    "car feet care second book carry took science eat room friend began idea fish mountain stop "
    "once base hear horse cut sure watch color face wood main enough plain girl usual young "
    "ready above ever red list though feel talk bird soon body dog family direct pose leave song"
)
WORDS = tuple(_WORD_TEXT.split())


def corpus(seed: int, lines: int = 2000) -> list[str]:
    """Seeded pseudo-sentences: what the BPE merges are learned from."""
    rng = random.Random(seed)
    out = []
    for _ in range(lines):
        words = rng.choices(WORDS, k=rng.randint(4, 14))
        out.append(" ".join(words).capitalize() + rng.choice(".?!,"))
    return out


def build_tokenizer(out: Path, seed: int):
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=320,
        special_tokens=list(SPECIAL_TOKENS),
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator(corpus(seed), trainer=trainer)
    fast = PreTrainedTokenizerFast(
        tokenizer_object=tok,
        eos_token="<|im_end|>",
        pad_token="<|endoftext|>",
        additional_special_tokens=list(SPECIAL_TOKENS[1:]),
    )
    # One token each (the prompt builder takes ids[:3] as "<|im_start|>assistant\n").
    fast.add_tokens(["assistant", "user", "system"])
    fast.save_pretrained(str(out))
    ids = fast("<|im_start|>assistant\nHello there.<|im_end|>\n")["input_ids"]
    start = fast.convert_tokens_to_ids("<|im_start|>")
    if ids[0] != start or fast.decode(ids[1:3]) != "assistant\n":
        raise SystemExit(f"make-tiny-qwen3-tts: bad role header tokens: {ids[:4]}")
    return fast


def talker_config(text_vocab: int) -> dict:
    n_lang = len(LANGUAGES)
    return {
        "vocab_size": 3072,
        "hidden_size": 64,
        "intermediate_size": 128,
        "num_hidden_layers": 2,
        "num_attention_heads": 4,
        "num_key_value_heads": 2,
        "head_dim": 32,
        "hidden_act": "silu",
        "max_position_embeddings": 8192,
        "rms_norm_eps": 1e-6,
        "rope_theta": 1000000.0,
        # Multimodal RoPE over the 16 rotary pairs of head_dim 32.
        "rope_scaling": {"rope_type": "default", "mrope_section": [8, 4, 4], "interleaved": True},
        "num_code_groups": 16,
        "text_hidden_size": 64,
        "text_vocab_size": text_vocab,
        "position_id_per_seconds": 12.5,
        **CODEC,
        "spk_id": {name: 3000 + i for i, name in enumerate(SPEAKERS)},
        "spk_is_dialect": {name: DIALECTS.get(name, False) for name in SPEAKERS},
        "codec_language_id": {name: 2050 + i for i, name in enumerate(LANGUAGES[:n_lang])},
        "code_predictor_config": {
            "vocab_size": CODEBOOK,
            "hidden_size": 64,
            "intermediate_size": 128,
            "num_hidden_layers": 1,
            "num_attention_heads": 4,
            "num_key_value_heads": 2,
            "head_dim": 32,
            "max_position_embeddings": 64,
            "rope_theta": 1000000.0,
            "num_code_groups": 16,
        },
    }


def speech_tokenizer_config() -> dict:
    return {
        "model_type": "qwen3_tts_tokenizer_12hz",
        "architectures": ["Qwen3TTSTokenizerV2Model"],
        "encoder_valid_num_quantizers": 16,
        "input_sample_rate": 24000,
        "output_sample_rate": 24000,
        "decode_upsample_rate": 1920,
        "encode_downsample_rate": 1920,
        "decoder_config": {
            "codebook_size": CODEBOOK,
            "codebook_dim": 32,
            "hidden_size": 32,
            "latent_dim": 32,
            "decoder_dim": 32,
            "intermediate_size": 64,
            "num_hidden_layers": 1,
            "num_attention_heads": 2,
            "num_key_value_heads": 2,
            "head_dim": 16,
            "num_quantizers": 16,
            "sliding_window": 72,
            "max_position_embeddings": 8000,
            "upsample_rates": [8, 5, 4, 3],
            "upsampling_ratios": [2, 2],
        },
        # Mimi: built by the talker for voice cloning (never used by CustomVoice).
        "encoder_config": {
            "hidden_size": 32,
            "intermediate_size": 64,
            "num_hidden_layers": 1,
            "num_attention_heads": 2,
            "num_key_value_heads": 2,
            "head_dim": 16,
            "num_filters": 4,
            "codebook_size": CODEBOOK,
            "codebook_dim": 32,
            "vector_quantization_hidden_dimension": 32,
            "num_quantizers": 16,
            "num_semantic_quantizers": 1,
            "upsampling_ratios": [8, 6, 5, 4],
            "upsample_groups": 32,  # = hidden_size (Mimi's default 512 is its own width)
            "sampling_rate": 24000,
            "frame_rate": 12.5,
        },
    }


def codec_classes() -> tuple[type, type, type]:
    """The 12 Hz codec's config, decoder and encoder classes: vllm-omni 0.30.0's copy (the
    vllm-omni engine venv), else qwen-tts 0.1.1's, which sglang-omni 0.1.9 serves (the
    SGLang-Omni engine venv; it imports once sglang-omni has patched transformers). The two
    copies name their weights alike; their random initialisation may differ, so build the
    folder once when two servers are to serve the same weights."""
    try:
        from vllm_omni.model_executor.models.qwen3_tts.tokenizer_12hz import (
            configuration_qwen3_tts_tokenizer_v2 as conf,
        )
        from vllm_omni.model_executor.models.qwen3_tts.tokenizer_12hz import (
            modeling_qwen3_tts_tokenizer_v2 as modeling,
        )
    except ImportError:
        from sglang_omni.models.qwen3_tts.compat import (
            apply_qwen_tts_transformers_compatibility_patches,
        )

        apply_qwen_tts_transformers_compatibility_patches()
        from qwen_tts.core.tokenizer_12hz import (
            configuration_qwen3_tts_tokenizer_v2 as conf,
        )
        from qwen_tts.core.tokenizer_12hz import (
            modeling_qwen3_tts_tokenizer_v2 as modeling,
        )
    return (
        conf.Qwen3TTSTokenizerV2Config,
        modeling.Qwen3TTSTokenizerV2Decoder,
        modeling.Qwen3TTSTokenizerV2Encoder,
    )


def write_speech_tokenizer(out: Path, seed: int) -> int:
    import torch
    from safetensors.torch import save_file
    from transformers import EncodecFeatureExtractor

    Qwen3TTSTokenizerV2Config, Qwen3TTSTokenizerV2Decoder, Qwen3TTSTokenizerV2Encoder = (
        codec_classes()
    )

    sub = out / "speech_tokenizer"
    sub.mkdir(parents=True, exist_ok=True)
    (sub / "config.json").write_text(json.dumps(speech_tokenizer_config(), indent=2) + "\n")
    EncodecFeatureExtractor(feature_size=1, sampling_rate=24000).save_pretrained(str(sub))
    config = Qwen3TTSTokenizerV2Config.from_pretrained(str(sub))
    # The talker builds this encoder at start (random, for voice cloning): fail here, not there.
    Qwen3TTSTokenizerV2Encoder._from_config(config.encoder_config)
    torch.manual_seed(seed)
    decoder = Qwen3TTSTokenizerV2Decoder._from_config(config.decoder_config)
    # The codebooks (a running sum of the vectors assigned to each code) start at zero: every
    # code would decode to the same zero vector, and the stream to digital silence (which the
    # audible-onset rule then counts as no audio). Random entries make each code its own vector.
    with torch.no_grad():
        for name, param in decoder.named_parameters():
            if name.endswith("_codebook.embedding_sum"):
                param.copy_(torch.randn_like(param))
        # Random layers of small initial scale leave the waveform near -170 dBFS. The last
        # convolution is linear: scaled so random codes decode near NOISE_DBFS (RMS).
        codes = torch.randint(0, CODEBOOK, (1, config.decoder_config.num_quantizers, 50))
        rms = float(decoder(codes).pow(2).mean().sqrt())
        decoder.decoder[-1].conv.weight.mul_(10 ** (NOISE_DBFS / 20) / max(rms, 1e-30))
    weights = decoder.state_dict().items()
    state = {f"decoder.{k}": v.detach().float().contiguous() for k, v in weights}
    save_file(state, str(sub / "model.safetensors"))
    return sum(p.numel() for p in decoder.parameters())


def main(argv: list[str]) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("out", type=Path, help="the model folder to write (created)")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    out: Path = args.out
    out.mkdir(parents=True, exist_ok=True)

    import torch
    from safetensors.torch import save_file

    tok = build_tokenizer(out, args.seed)
    ids = {name: tok.convert_tokens_to_ids(name) for name in SPECIAL_TOKENS}
    text_vocab = 64 * ((len(tok) + 63) // 64)  # the embedding table, rounded up
    config = {
        "architectures": ["Qwen3TTSForConditionalGeneration"],
        "model_type": "qwen3_tts",
        "tts_model_type": "custom_voice",
        "tokenizer_type": "qwen3_tts_tokenizer_12hz",
        "tts_model_size": "tiny",
        "dtype": "float32",
        "im_start_token_id": ids["<|im_start|>"],
        "im_end_token_id": ids["<|im_end|>"],
        "tts_pad_token_id": ids["<|tts_pad|>"],
        "tts_bos_token_id": ids["<|tts_text_bos|>"],
        "tts_eos_token_id": ids["<|tts_text_eod|>"],
        "talker_config": talker_config(text_vocab),
        "speaker_encoder_config": {
            "mel_dim": 128,
            "enc_dim": 64,  # the talker's hidden size: the embedding joins its input
            "enc_channels": [32, 32, 32, 32, 96],
            "enc_kernel_sizes": [5, 3, 3, 3, 1],
            "enc_dilations": [1, 2, 3, 4, 1],
            "enc_attention_channels": 16,
            "enc_res2net_scale": 4,
            "enc_se_channels": 16,
            "sample_rate": 24000,
        },
    }
    (out / "config.json").write_text(json.dumps(config, indent=2) + "\n")
    save_file({"placeholder": torch.zeros(1)}, str(out / "model.safetensors"))
    decoder_params = write_speech_tokenizer(out, args.seed)
    print(
        f"make-tiny-qwen3-tts: wrote {out} (text vocab {len(tok)}, codec decoder "
        f"{decoder_params} parameters, seed {args.seed})",
        file=sys.stderr,
    )


if __name__ == "__main__":
    main(sys.argv[1:])
