"""What agents are made of (providers, agents, tools, routing) and what they say (conversations
and messages). Everything belongs to a team."""

from agents.models.agents import Agent, AgentVersion
from agents.models.conversations import Attachment, Conversation, Message
from agents.models.hooks import Hook
from agents.models.providers import Provider, ProviderModel
from agents.models.routing import ModelRoute, RoutingRule
from agents.models.tools import McpServer, McpSignIn, Tool, ToolPolicy
from agents.models.workers import TurnWorker

__all__ = [
    "Agent",
    "AgentVersion",
    "Attachment",
    "Conversation",
    "Hook",
    "McpServer",
    "McpSignIn",
    "Message",
    "ModelRoute",
    "Provider",
    "ProviderModel",
    "RoutingRule",
    "Tool",
    "ToolPolicy",
    "TurnWorker",
]
