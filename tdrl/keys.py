"""Canonical key names: every key string of tdrl is spelled here once.

The names follow TorchRL 0.14, so that a TensorDict produced by TorchRL is read by tdrl and the
reverse. Nested keys are tuples; ``NEXT_*`` constants are the ``("next", ...)`` entries of a
transition. Anything else in tdrl imports these constants instead of writing the string.
"""

from __future__ import annotations

# --- transition -----------------------------------------------------------------------------
NEXT = "next"
OBSERVATION = "observation"
ACTION = "action"
REWARD = "reward"
DONE = "done"
TERMINATED = "terminated"
TRUNCATED = "truncated"
# A gymnasium env that is reset: the state the step started from was a reset state.
IS_INIT = "is_init"
# Recurrent state (TorchRL's LSTMModule / GRUModule names) and a recurrent body's output.
RECURRENT_STATE_H = "recurrent_state_h"
RECURRENT_STATE_C = "recurrent_state_c"
RECURRENT_STATE = "recurrent_state"
EMBED = "embed"
# A recurrent critic's own state and features (sb3-contrib's enable_critic_lstm), apart from the
# actor's.
CRITIC_RECURRENT_STATE_H = "recurrent_state_h_critic"
CRITIC_RECURRENT_STATE_C = "recurrent_state_c_critic"
CRITIC_RECURRENT_STATE = "recurrent_state_critic"
CRITIC_EMBED = "embed_critic"
NORMALIZED_OBSERVATION = "observation_normalized"
# Which actions are valid in this state (bool, one per action; TorchRL's name). An observation
# entry the env provides; categorical actors and DQN's choices honour it.
ACTION_MASK = "action_mask"

# Multi-agent batches (TorchRL's multi-agent layout): the group of the agents' entries, which agents
# take part in a step, and the global state of the env.
AGENTS = "agents"
MASK = "mask"
STATE = "state"

# Goal-conditioned envs (gymnasium-robotics' GoalEnv layout): the goal the state reached and
# the goal the episode asks for; hindsight replay relabels the second with a first.
ACHIEVED_GOAL = "achieved_goal"
DESIRED_GOAL = "desired_goal"
NEXT_ACHIEVED_GOAL = (NEXT, ACHIEVED_GOAL)
NEXT_DESIRED_GOAL = (NEXT, DESIRED_GOAL)
# A dict observation's selected entries concatenated into one network input (tdrl.modules.CatKeys).
FLAT_OBSERVATION = "observation_flat"

NEXT_OBSERVATION = (NEXT, OBSERVATION)
NEXT_REWARD = (NEXT, REWARD)
# The env's reward, kept beside the clipped one (tdrl.envs.RewardClipping).
REWARD_UNCLIPPED = "reward_unclipped"
NEXT_REWARD_UNCLIPPED = (NEXT, REWARD_UNCLIPPED)
NEXT_DONE = (NEXT, DONE)
NEXT_TERMINATED = (NEXT, TERMINATED)
NEXT_TRUNCATED = (NEXT, TRUNCATED)

# --- policy outputs (TorchRL 0.14 names) ----------------------------------------------------
LOC = "loc"
SCALE = "scale"
LOGITS = "logits"
ACTION_LOG_PROB = "action_log_prob"
# V-trace without an actor: the target policy's log-probability of the taken action.
TARGET_LOG_PROB = "target_log_prob"

# --- values written by critics and estimators -----------------------------------------------
STATE_VALUE = "state_value"
NEXT_STATE_VALUE = (NEXT, STATE_VALUE)
STATE_ACTION_VALUE = "state_action_value"
ACTION_VALUE = "action_value"
CHOSEN_ACTION_VALUE = "chosen_action_value"
ADVANTAGE = "advantage"
VALUE_TARGET = "value_target"
TD_ERROR = "td_error"

# --- intrinsic rewards (RND) ---------------------------------------------------------------
# Written under "next" beside the env's reward, so that estimators and losses stay as they are:
# an estimator with its keys renamed to these computes the intrinsic return. Its episode flags
# are all False: the intrinsic return runs across episode ends (Burda et al. 2018, sec. 2.3).
INTRINSIC_REWARD = "intrinsic_reward"
NEXT_INTRINSIC_REWARD = (NEXT, INTRINSIC_REWARD)
INTRINSIC_DONE = "intrinsic_done"
INTRINSIC_TERMINATED = "intrinsic_terminated"
INTRINSIC_TRUNCATED = "intrinsic_truncated"
INTRINSIC_VALUE = "intrinsic_state_value"
INTRINSIC_ADVANTAGE = "intrinsic_advantage"
INTRINSIC_VALUE_TARGET = "intrinsic_value_target"

# --- collector ------------------------------------------------------------------------------
COLLECTOR = "collector"
TRAJ_IDS = "traj_ids"
COLLECTOR_TRAJ_IDS = (COLLECTOR, TRAJ_IDS)
# Steps with a NaN or infinite observation, reward or action (Collector(on_nonfinite="flag")).
NONFINITE = "nonfinite"
COLLECTOR_NONFINITE = (COLLECTOR, NONFINITE)
# RayCollector: the version of the policy weights that acted, and the worker that collected.
COLLECTOR_POLICY_VERSION = (COLLECTOR, "policy_version")
COLLECTOR_WORKER = (COLLECTOR, "worker")
EPISODE_RETURN = "episode_return"
EPISODE_LENGTH = "episode_length"
# Name of the time dimension of a ``[num_envs, T]`` rollout (``TensorDict.names``).
TIME_DIM_NAME = "time"

# --- replay buffers -------------------------------------------------------------------------
INDEX = "index"
PRIORITY = "priority"
PRIORITY_WEIGHT = "priority_weight"
# Number of env steps between an n-step sample's root and its ("next", ...) entries
# (TorchRL's MultiStep name).
STEPS_TO_NEXT_OBS = "steps_to_next_obs"
NEXT_STEPS_TO_NEXT_OBS = (NEXT, STEPS_TO_NEXT_OBS)
# A discount already applied to ("next", ...) entries: gamma ** steps_to_next_obs.
GAMMA = "gamma"

# --- losses ---------------------------------------------------------------------------------
# Loss outputs (TorchRL's names): the entries whose name starts with LOSS_PREFIX are summed for
# backward; the others are detached diagnostics.
LOSS_PREFIX = "loss_"
LOSS = "loss"  # DQN's single term (TorchRL's DQNLoss)
FRACTION_ENTROPY = "fraction_entropy"  # FQF: entropy of the proposed fractions (diagnostic)
LOSS_OBJECTIVE = "loss_objective"
LOSS_CRITIC = "loss_critic"
LOSS_ENTROPY = "loss_entropy"
LOSS_ACTOR = "loss_actor"
LOSS_VALUE = "loss_value"
LOSS_QVALUE = "loss_qvalue"
LOSS_ALPHA = "loss_alpha"
# CQL's Lagrange multiplier of the conservative term (TorchRL's name).
LOSS_ALPHA_PRIME = "loss_alpha_prime"
# BCQ's conditional VAE of the data's actions (its ELBO).
LOSS_VAE = "loss_vae"
# RND's predictor (its distillation error) and the intrinsic critic.
LOSS_RND = "loss_rnd"
LOSS_INTRINSIC_VALUE = "loss_intrinsic_value"
# ICM's forward and inverse models.
LOSS_ICM_FORWARD = "loss_icm_forward"
LOSS_ICM_INVERSE = "loss_icm_inverse"
# PPG's auxiliary phase: the policy network's value head, its distillation loss, the behavioural
# cloning term KL(pi_old || pi) (weighted) and the mean KL itself (a diagnostic).
AUX_VALUE = "aux_value"
LOSS_AUX_VALUE = "loss_aux_value"
LOSS_CLONE = "loss_clone"
KL = "kl"
# GAIL (TorchRL's GAILLoss names): the policy's pairs beside the expert's, the discriminator's
# logit, and diagnostics (the gradient penalty, the mean D on each side).
COLLECTOR_OBSERVATION = "collector_observation"
COLLECTOR_ACTION = "collector_action"
D_LOGITS = "d_logits"
GP_LOSS = "gp_loss"
DISCRIMINATOR_EXPERT = "discriminator_expert"
DISCRIMINATOR_POLICY = "discriminator_policy"
# Behaviour cloning: the mean squared error of the actor's action to the data's (a diagnostic).
ACTION_ERROR = "action_error"
ENTROPY = "entropy"
KL_APPROX = "kl_approx"
CLIP_FRACTION = "clip_fraction"
ALPHA = "alpha"
